//! The bill: dollars per million webhooks of each measured scenario at list prices ([`crate::prices`]),
//! from what the bench measured: DynamoDB units as DynamoDB Local reported them ([`crate::counts`]), the
//! release intake's median invocation time and the bytes it wrote to its log per webhook
//! ([`crate::intake_process`]), the intake's memory from `infra/template.yaml`, and the requests each
//! webhook makes of API Gateway, Lambda and (for an applied event) the SQS FIFO queue.

use crate::costs::SQS_REQUESTS_PER_EVENT;
use crate::counts::{Measured, DUPLICATE, NEW_WEBHOOK, NOT_OURS};
use crate::intake_process::ProcessFigures;
use crate::prices;
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::capacity::deployment::{self, Deployment};
use local_lambda::template::Template;

/// The most messages one `SendMessageBatch` carries (SQS's limit).
const SQS_SEND_BATCH_MAX: u64 = 10;

/// SQS FIFO requests per applied event when its batches are full, as at a peak: the relay's
/// `SendMessageBatch` carries up to ten of its stream batch's events, the consumer's event source mapping
/// receives and deletes (`DeleteMessageBatch`) up to its `BatchSize`; both from the template. A quiet hour
/// sends batches of one: [`crate::costs::SQS_REQUESTS_PER_EVENT`], the capacity model's figure.
pub fn sqs_requests_at_full_batches(d: &Deployment) -> f64 {
    let send = d.relay_batch.clamp(1, SQS_SEND_BATCH_MAX) as f64;
    let consume = d.consumer_batch.max(1) as f64;
    1.0 / send + 2.0 / consume
}

/// The most a new webhook may write to CloudWatch Logs at INFO: its one line and its metrics record
/// (issue 43; `webhook-intake::it intake::logs` checks the same in CI).
pub const NEW_WEBHOOK_LOG_BYTES_MAX: f64 = 1024.0;

/// Fails when the release intake wrote more than [`NEW_WEBHOOK_LOG_BYTES_MAX`] per new webhook.
pub fn log_guard(process: &BTreeMap<&'static str, ProcessFigures>) -> Result<(), String> {
    match process.get(NEW_WEBHOOK) {
        Some(f) if f.log_bytes <= NEW_WEBHOOK_LOG_BYTES_MAX => Ok(()),
        Some(f) => Err(format!(
            "a new webhook wrote {:.0} log bytes, more than {NEW_WEBHOOK_LOG_BYTES_MAX}",
            f.log_bytes
        )),
        None => Err("the new webhook's log bytes were not measured".into()),
    }
}

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

/// Writes the bill of the three scenarios: each part and the total per million webhooks.
pub fn write(out: &mut String, units: &Measured, process: &BTreeMap<&'static str, ProcessFigures>) {
    let deployment = Template::from_repo().and_then(|t| deployment::read(&t, None, &[]));
    let d = match deployment {
        Ok(d) => d,
        Err(e) => {
            writeln!(out, "\n## The bill\n\ninfra/template.yaml not read: {e}").ok();
            return;
        }
    };
    let (memory_mb, sqs_per_event) = (d.intake_memory_mb, sqs_requests_at_full_batches(&d));
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
         the release intake's median invocation, billed per 1 ms; SQS FIFO: {sqs_per_event:.2} requests per \
         applied event at a peak's full batches (the relay's `SendMessageBatch` of {} and the consumer's \
         receive and `DeleteMessageBatch` of {}, the template's batch sizes; a quiet hour's batches of one \
         cost {SQS_REQUESTS_PER_EVENT} requests, {} a million more); \
         CloudWatch Logs: the bytes the intake wrote to stdout per webhook, its one INFO line and its metrics \
         record (Lambda's own START/END/REPORT lines \
         not included). The relay's and the consumer's Lambda time is not included.\n",
        prices::READ_ON,
        d.relay_batch.clamp(1, SQS_SEND_BATCH_MAX),
        d.consumer_batch,
        format_args!(
            "${:.2}",
            (SQS_REQUESTS_PER_EVENT - sqs_per_event) * prices::SQS_FIFO_REQUEST * 1e6
        ),
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
            lambda: prices::LAMBDA_REQUEST + memory_mb as f64 / 1024.0 * billed_ms / 1e3 * prices::LAMBDA_ARM_GB_SECOND,
            sqs: if applied {
                sqs_per_event * prices::SQS_FIFO_REQUEST
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
    fn full_batches_cost_a_send_of_ten_and_a_receive_and_delete_of_the_consumers_batch() {
        let template = Template::from_repo().unwrap();
        let mut d = deployment::read(&template, None, &[]).unwrap();
        (d.relay_batch, d.consumer_batch) = (100, 10);
        assert!((sqs_requests_at_full_batches(&d) - 0.3).abs() < 1e-9);
        (d.relay_batch, d.consumer_batch) = (4, 1);
        assert!((sqs_requests_at_full_batches(&d) - 2.25).abs() < 1e-9);
    }
}
