//! What starts each function and how Lambda runs it, read from the template: its `Timeout`,
//! `ReservedConcurrentExecutions`, `EventInvokeConfig` (asynchronous retries and event age, with Lambda's
//! defaults) and its `Events`, each read by its kind's reader: `route` (HTTP API routes with their auth, and
//! the API's throttling), `mapping` (the stream's and the queues' event source mappings), `scheduler` (the
//! schedules), over the shared property `reader`. Every property is one the local world emulates: a trigger
//! type or a property it does not know stops the read naming the function, the event and the property, so
//! nothing the template says is silently dropped (docs/LOCAL.md). Resources stay logical ids
//! (`PaymentEventsQueue`): the local world maps them to what stands in for them.

pub mod mapping;
mod reader;
pub mod route;
pub mod scheduler;

use crate::template::{Scope, Stack, Template};
use mapping::{QueueMapping, StreamMapping};
use reader::Reader;
use route::ApiRoute;
use scheduler::Schedule;
use serde_yaml_ng::Value;
use std::time::Duration;

/// Lambda's defaults where the template sets nothing: `Timeout` 3 s, asynchronous retries 2, event age 6 h.
const DEFAULT_TIMEOUT_SECONDS: u64 = 3;
const DEFAULT_ASYNC_RETRIES: u64 = 2;
const DEFAULT_EVENT_AGE_SECONDS: u64 = 21_600;

/// How a function runs and what starts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionTriggers {
    pub timeout: Duration,
    /// `ReservedConcurrentExecutions`; `None` when the template reserves nothing.
    pub reserved: Option<usize>,
    /// `EventInvokeConfig`: what Lambda does with an asynchronous invocation (the schedules').
    pub asynchronous: AsyncConfig,
    /// Each event by its name in the template.
    pub events: Vec<(String, Trigger)>,
}

/// `EventInvokeConfig`, with Lambda's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncConfig {
    pub max_retries: u64,
    pub max_event_age: Duration,
    /// The on-failure destination's queue (a logical id).
    pub on_failure: Option<String>,
}

/// One event of a function, as the local world emulates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// An `HttpApi` route.
    HttpApi(ApiRoute),
    /// The table's stream (`DynamoDB`): the event source mapping's settings.
    Stream(StreamMapping),
    /// An `SQS` event source mapping.
    Queue(QueueMapping),
    /// A `ScheduleV2`: EventBridge Scheduler invoking asynchronously.
    Schedule(Schedule),
}

impl FunctionTriggers {
    /// How `function` of `template` runs and what starts it in a stack standing in as `stack` (its parameters
    /// decide conditions and values); `None` when the function's `Condition` leaves it out of the stack.
    pub fn read(template: &Template, function: &str, stack: &Stack) -> Result<Option<Self>, String> {
        let doc = template.doc();
        let resource = &doc["Resources"][function];
        let scope = Scope::new(doc, stack);
        if let Some(condition) = resource["Condition"].as_str() {
            if !scope.condition(condition)? {
                return Ok(None);
            }
        }
        let reader = Reader {
            doc,
            scope: &scope,
            at: function.to_owned(),
        };
        let properties = &resource["Properties"];
        let globals = &doc["Globals"]["Function"];
        let timeout = match reader.count(&properties["Timeout"])? {
            Some(seconds) => seconds,
            None => reader.count(&globals["Timeout"])?.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
        };
        let reserved = reader.count(&properties["ReservedConcurrentExecutions"])?;
        let mut events = Vec::new();
        for (name, event) in properties["Events"].as_mapping().into_iter().flatten() {
            let name = name
                .as_str()
                .ok_or_else(|| format!("{function}: an event name is no string"))?;
            let reader = Reader {
                doc,
                scope: &scope,
                at: format!("{function}'s event {name}"),
            };
            events.push((name.to_owned(), trigger(&reader, event)?));
        }
        Ok(Some(Self {
            timeout: Duration::from_secs(timeout),
            reserved: reserved.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            asynchronous: asynchronous(&reader, &properties["EventInvokeConfig"])?,
            events,
        }))
    }
}

/// One event, by its `Type`: a type the local world does not emulate is refused by name.
fn trigger(reader: &Reader<'_>, event: &Value) -> Result<Trigger, String> {
    let p = &event["Properties"];
    Ok(match event["Type"].as_str().unwrap_or_default() {
        "HttpApi" => Trigger::HttpApi(route::event(reader, p)?),
        "DynamoDB" => Trigger::Stream(mapping::stream(reader, p)?),
        "SQS" => Trigger::Queue(mapping::queue(reader, p)?),
        "ScheduleV2" => Trigger::Schedule(scheduler::event(reader, p)?),
        kind => {
            return Err(format!(
                "{}: the trigger type {kind:?} is not emulated locally",
                reader.at
            ))
        }
    })
}

/// `EventInvokeConfig`, Lambda's defaults for what it leaves out.
fn asynchronous(reader: &Reader<'_>, config: &Value) -> Result<AsyncConfig, String> {
    reader.only(
        config,
        &["MaximumRetryAttempts", "MaximumEventAgeInSeconds", "DestinationConfig"],
    )?;
    Ok(AsyncConfig {
        max_retries: reader
            .count(&config["MaximumRetryAttempts"])?
            .unwrap_or(DEFAULT_ASYNC_RETRIES),
        max_event_age: Duration::from_secs(
            reader
                .count(&config["MaximumEventAgeInSeconds"])?
                .unwrap_or(DEFAULT_EVENT_AGE_SECONDS),
        ),
        on_failure: reader.on_failure(&config["DestinationConfig"])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use route::RouteAuth;

    /// The repository's template at its parameters' defaults.
    fn read(template: &Template, function: &str) -> Result<Option<FunctionTriggers>, String> {
        FunctionTriggers::read(template, function, &Stack::default())
    }

    fn event<'a>(triggers: &'a FunctionTriggers, name: &str) -> &'a Trigger {
        &triggers.events.iter().find(|(n, _)| n == name).expect(name).1
    }

    #[test]
    fn every_trigger_of_the_template_is_read() {
        let template = Template::from_repo().expect("infra/template.yaml");
        let mut read_functions = 0;
        for function in template.functions() {
            if let Some(triggers) = read(&template, &function).expect(&function) {
                assert!(!triggers.events.is_empty(), "{function} has no trigger");
                read_functions += 1;
            }
        }
        assert!(read_functions >= 8, "{read_functions}");
    }

    #[test]
    fn the_templates_settings_are_read_as_declared() {
        let template = Template::from_repo().expect("infra/template.yaml");
        let relay = read(&template, "OutboxRelayFunction")
            .expect("relay")
            .expect("in the stack");
        assert_eq!(relay.timeout, Duration::from_secs(10), "Globals' Timeout");
        let Trigger::Stream(outbox) = event(&relay, "Outbox") else {
            panic!("{relay:?}")
        };
        assert_eq!(
            (
                outbox.table.as_str(),
                outbox.batch_size,
                outbox.bisect,
                outbox.max_retries
            ),
            ("PaymentsTable", 100, true, Some(20))
        );
        assert_eq!(outbox.max_record_age, Some(Duration::from_secs(21_600)));
        assert_eq!(outbox.on_failure.as_deref(), Some("RelayFailuresQueue"));
        assert!(outbox.item_failures && outbox.filters.len() == 2);
        let passes = |record: serde_json::Value| outbox.filters.iter().any(|f| f.matches(&record));
        let transition = |name: &str| {
            serde_json::json!({"eventName": name, "dynamodb": {"NewImage": {
                "entity": {"S": "payment"}, "version": {"N": "3"}, "event_version": {"N": "3"}}}})
        };
        assert!(passes(transition("INSERT")) && passes(transition("MODIFY")));
        assert!(passes(
            serde_json::json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"entity": {"S": "event"}}}})
        ));
        // A change that moves no version (it removes event_version), a history item, a TTL deletion.
        assert!(!passes(
            serde_json::json!({"eventName": "MODIFY", "dynamodb": {"NewImage": {
            "entity": {"S": "payment"}, "version": {"N": "3"}}}})
        ));
        assert!(!passes(
            serde_json::json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"entity": {"S": "history"}}}})
        ));
        assert!(!passes(
            serde_json::json!({"eventName": "REMOVE", "dynamodb": {"OldImage": {
            "entity": {"S": "payment"}, "event_version": {"N": "3"}}}})
        ));
        let intake = read(&template, "WebhookIntakeFunction")
            .expect("intake")
            .expect("in the stack");
        let Trigger::HttpApi(ApiRoute { auth, path, .. }) = event(&intake, "Webhook") else {
            panic!("{intake:?}")
        };
        assert_eq!((*auth, path.as_str()), (RouteAuth::None, "/webhooks/{provider}"));
        assert_eq!(
            intake.reserved, None,
            "no reservation at the default WebhookReservedConcurrency"
        );
        let api = read(&template, "PaymentsApiFunction")
            .expect("api")
            .expect("in the stack");
        assert!(matches!(
            event(&api, "CreatePayment"),
            Trigger::HttpApi(ApiRoute {
                auth: RouteAuth::Iam,
                ..
            })
        ));
        let sweeper = read(&template, "CheckoutSweeperFunction")
            .expect("sweeper")
            .expect("in the stack");
        assert_eq!(
            (sweeper.timeout, sweeper.asynchronous.max_retries),
            (Duration::from_secs(25), 0)
        );
        assert_eq!(sweeper.asynchronous.on_failure.as_deref(), Some("ScheduleDlq"));
        assert!(matches!(
            event(&sweeper, "EveryMinute"),
            Trigger::Schedule(Schedule { delivery_retries: 3, dead_letter: Some(dlq), period, .. })
                if dlq == "ScheduleDlq" && *period == Duration::from_secs(60)
        ));
        let events = read(&template, "CheckoutEventsFunction")
            .expect("events")
            .expect("in the stack");
        assert_eq!(
            event(&events, "PaymentEvents"),
            &Trigger::Queue(QueueMapping {
                queue: "PaymentEventsQueue".into(),
                batch_size: 10,
                item_failures: true,
                max_concurrency: None
            })
        );
    }

    #[test]
    fn a_function_whose_condition_is_false_is_not_in_the_stack() {
        let template = Template::from_repo().expect("infra/template.yaml");
        let function = "WebhookEventBridgeFunction";
        assert_eq!(
            read(&template, function).expect("read"),
            None,
            "no StripePartnerEventSource"
        );
        let mut stack = Stack::default();
        let source = "aws.partner/stripe.com/ed_test_1".to_owned();
        stack.parameters.insert("StripePartnerEventSource".into(), source);
        let bridge = FunctionTriggers::read(&template, function, &stack)
            .expect("read")
            .expect("in the stack");
        assert!(
            matches!(event(&bridge, "StripeEvents"), Trigger::Queue(QueueMapping { queue, .. }) if queue == "StripeEventsQueue")
        );
    }

    #[test]
    fn a_reservation_given_as_a_parameter_is_read() {
        let template = Template::from_repo().expect("infra/template.yaml");
        let mut stack = Stack::default();
        stack.parameters.insert("WebhookReservedConcurrency".into(), "7".into());
        let intake = FunctionTriggers::read(&template, "WebhookIntakeFunction", &stack)
            .expect("intake")
            .expect("in the stack");
        assert_eq!(intake.reserved, Some(7));
    }

    /// The repository's template with `change` applied to `function`'s properties.
    fn changed(function: &str, change: impl FnOnce(&mut Value)) -> Template {
        let mut template = Template::from_repo().expect("infra/template.yaml");
        change(&mut template.doc_mut()["Resources"][function]["Properties"]);
        template
    }

    /// `function` of the repository's template, with `value` at `path` under its `Properties` (a number
    /// indexes a list), is refused with an error containing `expected`.
    fn refused(function: &str, path: &[&str], value: Value, expected: &str) {
        let template = changed(function, |p| {
            let target = path.iter().fold(p, |at, key| match key.parse::<usize>() {
                Ok(i) if at.is_sequence() => &mut at[i],
                _ => &mut at[*key],
            });
            *target = value;
        });
        let err = read(&template, function).expect_err(expected);
        assert!(err.contains(expected), "{function}: {err}");
    }

    #[test]
    fn an_unknown_property_or_trigger_type_is_refused_by_name() {
        let outbox = ["Events", "Outbox", "Properties"];
        refused(
            "OutboxRelayFunction",
            &[&outbox[..], &["TumblingWindowInSeconds"]].concat(),
            Value::from(60),
            "OutboxRelayFunction's event Outbox: the property TumblingWindowInSeconds",
        );
        refused(
            "OutboxRelayFunction",
            &["Events", "Outbox", "Type"],
            Value::from("Kinesis"),
            "the trigger type \"Kinesis\" is not emulated",
        );
        let on_failure = ["EventInvokeConfig", "DestinationConfig", "OnFailure", "Type"];
        refused(
            "CheckoutSweeperFunction",
            &on_failure,
            Value::from("Lambda"),
            "CheckoutSweeperFunction: an on-failure destination of type",
        );
        refused(
            "CheckoutSweeperFunction",
            &["EventInvokeConfig", "DestinationConfig", "OnSuccess"],
            Value::from("x"),
            "the property OnSuccess is not emulated",
        );
        refused(
            "OutboxRelayFunction",
            &[&outbox[..], &["FilterCriteria", "Filters", "0", "Pattern"]].concat(),
            Value::from(r#"{"eventName": [{"wildcard": "IN*"}]}"#),
            "event Outbox: the filter operator \"wildcard\" at eventName",
        );
        refused(
            "CheckoutEventsFunction",
            &["Events", "PaymentEvents", "Properties", "BatchSize"],
            Value::from(50),
            "event PaymentEvents: an SQS BatchSize of 50",
        );
        refused(
            "ReconcilerFunction",
            &["Events", "EveryFiveMinutes", "Properties", "ScheduleExpression"],
            Value::from("cron(0/5 * * * ? *)"),
            "event EveryFiveMinutes: the schedule expression \"cron(0/5 * * * ? *)\"",
        );
        refused(
            "PaymentsApiFunction",
            &["Events", "CreatePayment", "Properties", "Auth", "Authorizer"],
            Value::from("MyJwt"),
            "PaymentsApiFunction's event CreatePayment: the authorizer MyJwt",
        );
    }
}
