//! Each function triggered as the template declares: the HTTP API's routes (their auth and throttling) on
//! 127.0.0.1, the table's stream mapping, the SQS mappings, the schedules with Lambda's asynchronous
//! semantics. The readers (`local_lambda::triggers`) refuse what the local world cannot emulate, by name, before
//! anything starts.

use crate::clients::MappingClients;
use crate::functions::Function;
use crate::settings::Settings;
use local_lambda::async_invoke::{AsyncInvoker, Waits};
use local_lambda::http_api::Route;
use local_lambda::template::{Stack, Template};
use local_lambda::triggers::mapping::{QueueMapping, StreamMapping};
use local_lambda::triggers::route::{ApiRoute, ApiSettings};
use local_lambda::triggers::scheduler::Schedule;
use local_lambda::triggers::{AsyncConfig, Trigger};
use local_lambda::{schedule, sqs_poller, stream_mapping};
use std::sync::Arc;
use std::time::Duration;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The HTTP API's logical id: every `HttpApi` event of the template is on it.
const API: &str = "HttpApi";

/// What the triggers share: the stack's resources, the mappings' clients, the schedules' scale.
pub struct World<'a> {
    pub stack: &'a Stack,
    pub clients: &'a MappingClients,
    pub settings: &'a Settings,
}

/// Starts every function's mappings and schedules, and returns the HTTP API's routes for `http_api::serve`.
pub fn start(template: &Template, world: &World<'_>, functions: &[Function]) -> Result<Vec<Route>, Error> {
    let api = ApiSettings::read(template, API, world.stack)?;
    let caller = orchestrator_session(world.stack);
    let mut routes = Vec::new();
    for function in functions {
        for (event, trigger) in &function.triggers.events {
            match trigger {
                Trigger::HttpApi(ApiRoute { method, path, auth }) => routes.push(Route {
                    method: method.clone(),
                    path: path.clone(),
                    auth: *auth,
                    throttle: api.throttle(method, path),
                    function: function.pool.clone(),
                    caller: caller.clone(),
                }),
                Trigger::Stream(mapping) => stream(world, function, mapping)?,
                Trigger::Queue(QueueMapping { queue, batch_size, .. }) => {
                    let url = resource(world.stack, queue, &function.name)?;
                    let sqs = world.clients.sqs(&function.binary);
                    sqs_poller::start_mapping(sqs, url, i32::try_from(*batch_size)?, function.pool.clone());
                }
                Trigger::Schedule(Schedule { period, .. }) => schedule(world, function, event, *period)?,
            }
        }
    }
    Ok(routes)
}

/// The table's stream mapping into `function`, read with its role's client.
fn stream(world: &World<'_>, function: &Function, mapping: &StreamMapping) -> Result<(), Error> {
    let stream = resource(world.stack, &format!("{}.StreamArn", mapping.table), &function.name)?;
    let on_failure = destination(world, mapping.on_failure.as_deref(), function)?;
    let streams = world.clients.streams(&function.binary);
    stream_mapping::start(streams, stream, mapping.clone(), function.pool.clone(), on_failure);
    Ok(())
}

/// The schedule `event` of `function`: every `period` (scaled), invoked asynchronously as Scheduler does.
fn schedule(world: &World<'_>, function: &Function, event: &str, period: Duration) -> Result<(), Error> {
    let scale = world.settings.time_scale;
    let config = scaled_config(&function.triggers.asynchronous, scale);
    let invoker = AsyncInvoker {
        function: function.pool.clone(),
        name: function.name.clone(),
        destination: destination(world, config.on_failure.as_deref(), function)?,
        config,
        waits: scaled(Waits::default(), scale),
    };
    let every = period / scale;
    println!("{}: {event} every {every:?}", function.name);
    schedule::start(event.to_owned(), every, Arc::new(invoker));
    Ok(())
}

/// A session of the role `OrchestratorRoleArn` names (`arn:aws:sts::<account>:assumed-role/<name>/local`): who the
/// local world's callers are, as the payments and checkout APIs allow only the orchestrator's sessions.
fn orchestrator_session(stack: &Stack) -> Option<String> {
    let role = stack.parameters.get("OrchestratorRoleArn")?;
    let (head, name) = role.split_once(":role/")?;
    let account = head.rsplit(':').next()?;
    Some(format!("arn:aws:sts::{account}:assumed-role/{name}/local"))
}

/// The local counterpart of the stack's resource `id`, which `function`'s trigger names.
fn resource(stack: &Stack, id: &str, function: &str) -> Result<String, Error> {
    stack.resources.get(id).cloned().ok_or_else(|| {
        format!("{function}: its trigger names {id}, which the local world has no counterpart of").into()
    })
}

/// An on-failure destination's queue (a logical id) as the client that sends to it and its URL.
fn destination(
    world: &World<'_>,
    queue: Option<&str>,
    function: &Function,
) -> Result<Option<(aws_sdk_sqs::Client, String)>, Error> {
    let sqs = || world.clients.sqs(&function.binary);
    queue
        .map(|id| Ok((sqs(), resource(world.stack, id, &function.name)?)))
        .transpose()
}

/// `config` with its event age `scale` times shorter, as the period is: the template keeps a run's retries
/// within its own period (`MaximumEventAgeInSeconds` under the rate), and so does the faster local world.
fn scaled_config(config: &AsyncConfig, scale: u32) -> AsyncConfig {
    AsyncConfig {
        max_event_age: config.max_event_age / scale,
        ..config.clone()
    }
}

/// Lambda's waits between asynchronous retries, `scale` times shorter.
fn scaled(waits: Waits, scale: u32) -> Waits {
    Waits {
        after_error: waits.after_error.map(|w| w / scale),
        throttle_first: waits.throttle_first / scale,
        throttle_max: waits.throttle_max / scale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_faster_world_keeps_each_runs_retries_within_its_period() {
        let reconciler = AsyncConfig {
            max_retries: 0,
            max_event_age: Duration::from_secs(240),
            on_failure: Some("ScheduleDlq".into()),
        };
        let config = scaled_config(&reconciler, 60);
        assert_eq!(
            config.max_event_age,
            Duration::from_secs(4),
            "under the 5 s the 5-minute rate becomes"
        );
        assert_eq!((config.max_retries, config.on_failure), (0, Some("ScheduleDlq".into())));
        let waits = scaled(Waits::default(), 60);
        assert_eq!(waits.after_error, [Duration::from_secs(1), Duration::from_secs(2)]);
    }
}
