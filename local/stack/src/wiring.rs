//! Each function triggered as the template declares: the HTTP API's routes (their auth and throttling) on
//! 127.0.0.1, the table's stream mapping, the SQS mappings, the schedules with Lambda's asynchronous
//! semantics. The readers (`local_dev::triggers`) refuse what the local world cannot emulate, by name, before
//! anything starts.

use crate::clients::MappingClients;
use crate::functions::Function;
use crate::settings::Settings;
use local_dev::async_invoke::{AsyncInvoker, Waits};
use local_dev::http_api::Route;
use local_dev::template::{Stack, Template};
use local_dev::triggers::Trigger;
use std::sync::Arc;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The HTTP API's logical id: every `HttpApi` event of the template is on it.
const API: &str = "HttpApi";

/// Starts every function's mappings and schedules, and returns the HTTP API's routes for `http_api::serve`.
pub fn start(
    template: &Template,
    stack: &Stack,
    functions: &[Function],
    settings: &Settings,
    clients: &MappingClients,
) -> Result<Vec<Route>, Error> {
    let api = template.http_api(API, stack)?;
    let caller = orchestrator_session(stack);
    let mut routes = Vec::new();
    for function in functions {
        for (event, trigger) in &function.triggers.events {
            match trigger {
                Trigger::HttpApi { method, path, auth } => routes.push(Route {
                    method: method.clone(),
                    path: path.clone(),
                    auth: auth.clone(),
                    throttle: api.throttle(method, path),
                    function: function.pool.clone(),
                    caller: caller.clone(),
                }),
                Trigger::Stream(mapping) => {
                    let stream = resource(stack, &format!("{}.StreamArn", mapping.table), &function.name)?;
                    let on_failure = destination(stack, mapping.on_failure.as_deref(), function, clients)?;
                    let streams = clients.streams(&function.binary);
                    local_dev::stream_mapping::start(streams, stream, mapping.clone(), function.pool.clone(), on_failure);
                }
                Trigger::Queue { queue, batch_size, .. } => {
                    let url = resource(stack, queue, &function.name)?;
                    let size = i32::try_from(*batch_size)?;
                    local_dev::sqs_poller::start_mapping(clients.sqs(&function.binary), url, size, function.pool.clone());
                }
                Trigger::Schedule { period, .. } => {
                    let invoker = AsyncInvoker {
                        function: function.pool.clone(),
                        name: function.name.clone(),
                        config: function.triggers.asynchronous.clone(),
                        destination: destination(stack, function.triggers.asynchronous.on_failure.as_deref(), function, clients)?,
                        waits: scaled(Waits::default(), settings.time_scale),
                    };
                    let every = *period / settings.time_scale;
                    println!("{}: {event} every {every:?}", function.name);
                    local_dev::schedule::start(event.clone(), every, Arc::new(invoker));
                }
            }
        }
    }
    Ok(routes)
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
    stack
        .resources
        .get(id)
        .cloned()
        .ok_or_else(|| format!("{function}: its trigger names {id}, which the local world has no counterpart of").into())
}

/// An on-failure destination's queue (a logical id) as the client that sends to it and its URL.
fn destination(
    stack: &Stack,
    queue: Option<&str>,
    function: &Function,
    clients: &MappingClients,
) -> Result<Option<(aws_sdk_sqs::Client, String)>, Error> {
    queue
        .map(|id| Ok((clients.sqs(&function.binary), resource(stack, id, &function.name)?)))
        .transpose()
}

/// Lambda's waits between asynchronous retries, `scale` times shorter.
fn scaled(waits: Waits, scale: u32) -> Waits {
    Waits {
        after_error: waits.after_error.map(|w| w / scale),
        throttle_first: waits.throttle_first / scale,
        throttle_max: waits.throttle_max / scale,
    }
}
