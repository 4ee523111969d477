//! The bill: dollars per million webhooks of each measured scenario at list prices ([`crate::prices`]),
//! from what the bench measured: DynamoDB units as DynamoDB Local reported them ([`crate::counts`]), the
//! release intake's median invocation time and the bytes it wrote to its log per webhook
//! ([`crate::intake_process`]), the intake's memory from `infra/template.yaml`, and the requests each
//! webhook makes of API Gateway, Lambda and (for an applied event) the SQS FIFO queue.

use crate::counts::{Measured, DUPLICATE, NEW_WEBHOOK, NOT_OURS};
use crate::intake_process::ProcessFigures;
use crate::prices;
use std::collections::BTreeMap;
use std::fmt::Write;

// SQS FIFO requests per applied event: the relay's `SendMessageBatch`, and the consumer's event source
// mapping's `ReceiveMessage` and `DeleteMessageBatch`, each at one message per batch (a stream batch of one
// event, as at a million webhooks a month: one every 2.6 s; full batches of 10 would cost a tenth). One
// figure with the capacity model's.
use crate::costs::SQS_REQUESTS_PER_EVENT;

/// One scenario's parts, in dollars per webhook.
struct Parts {
    dynamodb: f64,
    api_gateway: f64,
    lambda: f64,
    sqs: f64,
    logs: f64,
}

impl Parts {
    fn total(&self) -> f64 {
        self.dynamodb + self.api_gateway + self.lambda + self.sqs + self.logs
    }
}

/// The webhook intake's `MemorySize` in MB: its own in `infra/template.yaml`, else the `Globals`'.
pub fn intake_memory_mb(template: &str) -> Option<u32> {
    let memory = |block: &str| {
        block
            .lines()
            .find_map(|l| l.trim().strip_prefix("MemorySize:").and_then(|v| v.trim().parse().ok()))
    };
    // Each key is looked for at a line's start: a first line is one too.
    let template = format!("\n{template}");
    let function = template.split("\n  WebhookIntakeFunction:").nth(1)?;
    // The function's block ends at the next resource (two-space indent).
    let end = function
        .match_indices("\n  ")
        .find(|(i, _)| !function[i + 3..].starts_with(' '))
        .map_or(function.len(), |(i, _)| i);
    let globals = template.split("\nGlobals:").nth(1)?;
    memory(&function[..end]).or_else(|| memory(globals.split("\nResources:").next()?))
}

/// Writes the bill of the three scenarios: each part and the total per million webhooks.
pub fn write(out: &mut String, units: &Measured, process: &BTreeMap<&'static str, ProcessFigures>) {
    let template = std::fs::read_to_string(local_dev::service::repo_root().join("infra/template.yaml"));
    let Some(memory_mb) = template.ok().as_deref().and_then(intake_memory_mb) else {
        writeln!(
            out,
            "\n## The bill\n\nNo MemorySize for WebhookIntakeFunction in infra/template.yaml."
        )
        .ok();
        return;
    };
    writeln!(
        out,
        "\n## The bill: dollars per million webhooks, from the figures above\n"
    )
    .ok();
    let archive_wcu = units.archive_wcu_per_event as f64;
    writeln!(
        out,
        "List prices of {} (`local/bench/src/prices.rs`, with their sources), us-east-1, no free tier. DynamoDB: \
         the table's and the indexes' units as DynamoDB Local reported them (an index write billed as a write \
         unit), and for an applied event the relay's archive of it ({archive_wcu} WCU, off the \
         webhook's path); \
         API Gateway: one HTTP API request; Lambda (arm64, {memory_mb} MB from the template): one request and \
         the release intake's median invocation, billed per 1 ms; SQS FIFO: {SQS_REQUESTS_PER_EVENT} requests \
         per applied event (the relay's send, the consumer's receive and delete, one message a batch); \
         CloudWatch Logs: the bytes the intake wrote to stdout per webhook (Lambda's own START/END/REPORT lines \
         not included). The relay's and the consumer's Lambda time is not included.\n",
        prices::READ_ON
    )
    .ok();
    writeln!(
        out,
        "| scenario | RCU | WCU (table + indexes, + archive) | p50 | log bytes | DynamoDB | API Gateway | Lambda | SQS | Logs | **total** |\n\
         |---|---|---|---|---|---|---|---|---|---|---|"
    )
    .ok();
    for (scenario, applied) in [(NEW_WEBHOOK, true), (DUPLICATE, false), (NOT_OURS, false)] {
        let (Some(measured), Some(figures)) = (units.scenarios.get(scenario), process.get(scenario)) else {
            writeln!(out, "| {scenario} | not measured |||||||||| ").ok();
            continue;
        };
        let billed_ms = (figures.p50.as_secs_f64() * 1e3).ceil();
        // An applied event's index units are writes (the `open-items` entry); otherwise reads (a query).
        let (index_writes, index_reads) = if applied {
            (measured.units.index, 0.0)
        } else {
            (0.0, measured.units.index)
        };
        let archive = if applied { archive_wcu } else { 0.0 };
        let write_units = measured.units.write + index_writes + archive;
        let parts = Parts {
            dynamodb: (measured.units.read + index_reads) * prices::DYNAMODB_READ_UNIT
                + write_units * prices::DYNAMODB_WRITE_UNIT,
            api_gateway: prices::HTTP_API_REQUEST,
            lambda: prices::LAMBDA_REQUEST
                + f64::from(memory_mb) / 1024.0 * billed_ms / 1e3 * prices::LAMBDA_ARM_GB_SECOND,
            sqs: if applied {
                SQS_REQUESTS_PER_EVENT * prices::SQS_FIFO_REQUEST
            } else {
                0.0
            },
            logs: figures.log_bytes * prices::LOGS_INGESTED_BYTE,
        };
        let m = |dollars: f64| format!("${:.2}", dollars * 1e6);
        writeln!(
            out,
            "| {scenario} | {} | {} + {} + {archive} | {billed_ms} ms | {:.0} | {} | {} | {} | {} | {} | **{}** |",
            measured.units.read + index_reads,
            measured.units.write,
            index_writes,
            figures.log_bytes,
            m(parts.dynamodb),
            m(parts.api_gateway),
            m(parts.lambda),
            m(parts.sqs),
            m(parts.logs),
            m(parts.total())
        )
        .ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intakes_memory_is_its_own_else_the_globals() {
        let globals = "Globals:\n  Function:\n    MemorySize: 256\nResources:\n";
        let own = format!("{globals}  WebhookIntakeFunction:\n    Properties:\n      MemorySize: 512\n  Other:\n    MemorySize: 1024\n");
        assert_eq!(intake_memory_mb(&own), Some(512));
        let none = format!(
            "{globals}  WebhookIntakeFunction:\n    Properties:\n      Timeout: 5\n  Other:\n    MemorySize: 1024\n"
        );
        assert_eq!(intake_memory_mb(&none), Some(256));
        let template = std::fs::read_to_string(local_dev::service::repo_root().join("infra/template.yaml")).unwrap();
        assert!(intake_memory_mb(&template).is_some());
    }
}
