//! What starts each function and how Lambda runs it, read from the template: its `Timeout`,
//! `ReservedConcurrentExecutions`, `EventInvokeConfig` (asynchronous retries and event age, with Lambda's
//! defaults) and its `Events` (HTTP API routes with their auth, the stream's and the queues' event source
//! mappings, the schedules). Every property is one the local world emulates: a trigger type or a property it
//! does not know stops the read naming the function, the event and the property, so nothing the template
//! says is silently dropped (docs/LOCAL.md). Resources stay logical ids (`PaymentEventsQueue`): the local
//! world maps them to what stands in for them.

use crate::event_pattern::EventPattern;
use crate::template::{intrinsic, Scope, Stack, Template};
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

/// Whether an HTTP API route needs a SigV4-signed caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAuth {
    /// The API's `DefaultAuthorizer: AWS_IAM`.
    Iam,
    /// `Auth: {Authorizer: NONE}`: public.
    None,
}

/// API Gateway's throttling of a route: a token bucket of `burst` requests refilled at `rate` a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throttle {
    pub rate: f64,
    pub burst: u64,
}

/// An `AWS::Serverless::HttpApi`'s settings the front plays: each route's throttling (its `RouteSettings`
/// entry, else `DefaultRouteSettings`). Its `Auth` is read with each route; its `Name`, `Description`, access
/// log and `DetailedMetricsEnabled` change nothing a caller sees.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSettings {
    pub default: Option<Throttle>,
    /// By route key (`POST /webhooks/{provider}`).
    pub routes: Vec<(String, Throttle)>,
}

impl ApiSettings {
    /// The throttling of the route `method path`.
    #[must_use]
    pub fn throttle(&self, method: &str, path: &str) -> Option<Throttle> {
        let key = format!("{method} {path}");
        self.routes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, t)| *t)
            .or(self.default)
    }
}

/// One event of a function, as the local world emulates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// An `HttpApi` route (`Method` and `Path` as API Gateway matches them).
    HttpApi {
        method: String,
        path: String,
        auth: RouteAuth,
    },
    /// The table's stream (`DynamoDB`): the event source mapping's settings.
    Stream(StreamMapping),
    /// An `SQS` event source mapping (a FIFO queue's message groups are the queue's).
    Queue {
        queue: String,
        batch_size: u64,
        item_failures: bool,
        /// `ScalingConfig.MaximumConcurrency` (2 to 1,000): the most batches in flight at once. The local
        /// mapping runs one batch at a time, always within it; the capacity model reads it.
        max_concurrency: Option<u64>,
    },
    /// A `ScheduleV2`: EventBridge Scheduler invoking asynchronously.
    Schedule {
        /// The `rate(...)` expression's period ([`rate`]).
        period: Duration,
        /// The schedule's own retries: of delivery to Lambda only (throttled or unreachable).
        delivery_retries: u64,
        delivery_max_age: Duration,
        dead_letter: Option<String>,
    },
}

/// A `DynamoDB` event source mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMapping {
    /// The table whose stream it reads (a logical id).
    pub table: String,
    pub starting_position: String,
    pub batch_size: u64,
    pub batching_window: Duration,
    pub bisect: bool,
    /// `None`: retried until the record expires (-1, the default).
    pub max_retries: Option<u64>,
    pub max_record_age: Option<Duration>,
    pub item_failures: bool,
    /// The on-failure destination's queue (a logical id).
    pub on_failure: Option<String>,
    /// The `FilterCriteria` patterns (a record passes when one matches; none: every record).
    pub filters: Vec<EventPattern>,
}

/// The properties each trigger type may have: anything else is refused by name.
const KNOWN: [(&str, &[&str]); 4] = [
    ("HttpApi", &["ApiId", "Method", "Path", "Auth"]),
    (
        "DynamoDB",
        &[
            "Stream",
            "StartingPosition",
            "BatchSize",
            "MaximumBatchingWindowInSeconds",
            "ParallelizationFactor",
            "BisectBatchOnFunctionError",
            "MaximumRetryAttempts",
            "MaximumRecordAgeInSeconds",
            "FunctionResponseTypes",
            "DestinationConfig",
            "FilterCriteria",
        ],
    ),
    ("SQS", &["Queue", "BatchSize", "FunctionResponseTypes", "ScalingConfig"]),
    (
        "ScheduleV2",
        &["Name", "ScheduleExpression", "RetryPolicy", "DeadLetterConfig"],
    ),
];

impl Template {
    /// How `function` runs and what starts it in a stack standing in as `stack` (its parameters decide
    /// conditions and values); `None` when the function's `Condition` leaves it out of the stack.
    pub fn triggers(&self, function: &str, stack: &Stack) -> Result<Option<FunctionTriggers>, String> {
        let doc = self.doc();
        let resource = &doc["Resources"][function];
        let scope = Scope::new(doc, stack);
        if let Some(condition) = resource["Condition"].as_str() {
            if !scope.condition(condition)? {
                return Ok(None);
            }
        }
        let read = Reader {
            doc,
            scope: &scope,
            at: function.to_owned(),
        };
        let properties = &resource["Properties"];
        let globals = &doc["Globals"]["Function"];
        let timeout = match read.count(&properties["Timeout"])? {
            Some(seconds) => seconds,
            None => read.count(&globals["Timeout"])?.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
        };
        let reserved = read.count(&properties["ReservedConcurrentExecutions"])?;
        let mut events = Vec::new();
        for (name, event) in properties["Events"].as_mapping().into_iter().flatten() {
            let name = name
                .as_str()
                .ok_or_else(|| format!("{function}: an event name is no string"))?;
            let read = Reader {
                doc,
                scope: &scope,
                at: format!("{function}'s event {name}"),
            };
            events.push((name.to_owned(), read.trigger(event)?));
        }
        Ok(Some(FunctionTriggers {
            timeout: Duration::from_secs(timeout),
            reserved: reserved.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            asynchronous: read.asynchronous(&properties["EventInvokeConfig"])?,
            events,
        }))
    }
}

impl Template {
    /// The settings of the HTTP API `api` (a logical id) in a stack standing in as `stack`; a property it does
    /// not play is refused by name.
    pub fn http_api(&self, api: &str, stack: &Stack) -> Result<ApiSettings, String> {
        let doc = self.doc();
        let resource = &doc["Resources"][api];
        if resource["Type"].as_str() != Some("AWS::Serverless::HttpApi") {
            return Err(format!("{api} is no AWS::Serverless::HttpApi of the template"));
        }
        let scope = Scope::new(doc, stack);
        let read = Reader {
            doc,
            scope: &scope,
            at: api.to_owned(),
        };
        let p = &resource["Properties"];
        read.only(
            p,
            &[
                "Name",
                "Description",
                "Auth",
                "DefaultRouteSettings",
                "RouteSettings",
                "AccessLogSettings",
            ],
        )?;
        read.only(&p["Auth"], &["EnableIamAuthorizer", "DefaultAuthorizer"])?;
        read.only(&p["AccessLogSettings"], &["DestinationArn", "Format"])?;
        let mut routes = Vec::new();
        for (key, settings) in p["RouteSettings"].as_mapping().into_iter().flatten() {
            let key = key.as_str().ok_or_else(|| format!("{api}: a route key is no string"))?;
            if let Some(throttle) = read.throttle(settings)? {
                routes.push((key.to_owned(), throttle));
            }
        }
        Ok(ApiSettings {
            default: read.throttle(&p["DefaultRouteSettings"])?,
            routes,
        })
    }
}

/// Reads one function's (or one event's) properties, errors naming where (`at`).
struct Reader<'a> {
    doc: &'a Value,
    scope: &'a Scope<'a>,
    at: String,
}

impl Reader<'_> {
    fn trigger(&self, event: &Value) -> Result<Trigger, String> {
        let kind = event["Type"].as_str().unwrap_or_default();
        let known = KNOWN
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, names)| *names)
            .ok_or_else(|| format!("{}: the trigger type {kind:?} is not emulated locally", self.at))?;
        let p = &event["Properties"];
        self.only(p, known)?;
        Ok(match kind {
            "HttpApi" => self.route(p)?,
            "DynamoDB" => Trigger::Stream(self.stream(p)?),
            "SQS" => self.queue(p)?,
            _ => self.schedule(p)?,
        })
    }

    /// Refuses any key of `map` not in `known`, naming it.
    fn only(&self, map: &Value, known: &[&str]) -> Result<(), String> {
        for key in map.as_mapping().into_iter().flatten().map(|(k, _)| k) {
            let key = key.as_str().unwrap_or_default();
            if !known.contains(&key) {
                return Err(format!("{}: the property {key} is not emulated locally", self.at));
            }
        }
        Ok(())
    }

    /// A route: its auth is its own `Authorizer`, or else its API's `DefaultAuthorizer` (none: public).
    fn route(&self, p: &Value) -> Result<Trigger, String> {
        let api = self.logical_id(&p["ApiId"], "ApiId")?;
        self.only(&p["Auth"], &["Authorizer"])?;
        let default = &self.doc["Resources"][api.as_str()]["Properties"]["Auth"]["DefaultAuthorizer"];
        let authorizer = match self.text(&p["Auth"]["Authorizer"])? {
            Some(own) => Some(own),
            None => self.text(default)?,
        };
        let auth = match authorizer.as_deref() {
            Some("AWS_IAM") => RouteAuth::Iam,
            None | Some("NONE") => RouteAuth::None,
            Some(other) => return Err(format!("{}: the authorizer {other} is not emulated locally", self.at)),
        };
        Ok(Trigger::HttpApi {
            method: self.needed(&p["Method"], "Method")?,
            path: self.needed(&p["Path"], "Path")?,
            auth,
        })
    }

    fn stream(&self, p: &Value) -> Result<StreamMapping, String> {
        let stream = self.logical_id(&p["Stream"], "Stream")?;
        if self.count(&p["ParallelizationFactor"])?.is_some_and(|n| n != 1) {
            return Err(format!(
                "{}: a ParallelizationFactor other than 1 is not emulated locally",
                self.at
            ));
        }
        let filters = p["FilterCriteria"]["Filters"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        self.only(&p["FilterCriteria"], &["Filters"])?;
        Ok(StreamMapping {
            table: stream,
            starting_position: self.needed(&p["StartingPosition"], "StartingPosition")?,
            batch_size: self.count(&p["BatchSize"])?.unwrap_or(100),
            batching_window: Duration::from_secs(self.count(&p["MaximumBatchingWindowInSeconds"])?.unwrap_or(0)),
            bisect: self.text(&p["BisectBatchOnFunctionError"])?.as_deref() == Some("true"),
            max_retries: self.signed(&p["MaximumRetryAttempts"])?,
            max_record_age: self.signed(&p["MaximumRecordAgeInSeconds"])?.map(Duration::from_secs),
            item_failures: self.item_failures(p)?,
            on_failure: self.on_failure(&p["DestinationConfig"])?,
            filters: filters
                .iter()
                .map(|f| {
                    self.only(f, &["Pattern"])?;
                    let text = self.needed(&f["Pattern"], "FilterCriteria's Pattern")?;
                    EventPattern::parse(&text).map_err(|why| format!("{}: {why}", self.at))
                })
                .collect::<Result<_, _>>()?,
        })
    }

    /// A route's `ThrottlingRateLimit` and `ThrottlingBurstLimit` (both, or neither: no throttling).
    fn throttle(&self, settings: &Value) -> Result<Option<Throttle>, String> {
        self.only(
            settings,
            &["ThrottlingRateLimit", "ThrottlingBurstLimit", "DetailedMetricsEnabled"],
        )?;
        let rate = self.text(&settings["ThrottlingRateLimit"])?;
        let burst = self.count(&settings["ThrottlingBurstLimit"])?;
        match (rate, burst) {
            (None, None) => Ok(None),
            (Some(rate), Some(burst)) => {
                let rate = rate
                    .parse()
                    .map_err(|_| format!("{}: ThrottlingRateLimit {rate} is no number", self.at))?;
                Ok(Some(Throttle { rate, burst }))
            }
            _ => Err(format!(
                "{}: a throttle needs both ThrottlingRateLimit and ThrottlingBurstLimit here",
                self.at
            )),
        }
    }

    /// An SQS mapping: one receive per batch here, so at most 10 (more needs a batching window).
    fn queue(&self, p: &Value) -> Result<Trigger, String> {
        let batch_size = self.count(&p["BatchSize"])?.unwrap_or(10);
        if !(1..=10).contains(&batch_size) {
            return Err(format!(
                "{}: an SQS BatchSize of {batch_size} (over 10) is not emulated locally",
                self.at
            ));
        }
        self.only(&p["ScalingConfig"], &["MaximumConcurrency"])?;
        let max_concurrency = self.count(&p["ScalingConfig"]["MaximumConcurrency"])?;
        if max_concurrency.is_some_and(|n| !(2..=1000).contains(&n)) {
            return Err(format!("{}: MaximumConcurrency must be 2 to 1000", self.at));
        }
        Ok(Trigger::Queue {
            queue: self.logical_id(&p["Queue"], "Queue")?,
            batch_size,
            item_failures: self.item_failures(p)?,
            max_concurrency,
        })
    }

    fn schedule(&self, p: &Value) -> Result<Trigger, String> {
        self.only(&p["RetryPolicy"], &["MaximumEventAgeInSeconds", "MaximumRetryAttempts"])?;
        self.only(&p["DeadLetterConfig"], &["Arn"])?;
        let dead_letter = match p["DeadLetterConfig"]["Arn"] {
            Value::Null => None,
            ref arn => Some(self.logical_id(arn, "DeadLetterConfig's Arn")?),
        };
        Ok(Trigger::Schedule {
            period: rate(&self.needed(&p["ScheduleExpression"], "ScheduleExpression")?)
                .map_err(|why| format!("{}: {why}", self.at))?,
            // EventBridge Scheduler's defaults: 185 retries over 24 hours.
            delivery_retries: self.count(&p["RetryPolicy"]["MaximumRetryAttempts"])?.unwrap_or(185),
            delivery_max_age: Duration::from_secs(
                self.count(&p["RetryPolicy"]["MaximumEventAgeInSeconds"])?
                    .unwrap_or(86_400),
            ),
            dead_letter,
        })
    }

    /// `EventInvokeConfig`, Lambda's defaults for what it leaves out.
    fn asynchronous(&self, config: &Value) -> Result<AsyncConfig, String> {
        self.only(
            config,
            &["MaximumRetryAttempts", "MaximumEventAgeInSeconds", "DestinationConfig"],
        )?;
        Ok(AsyncConfig {
            max_retries: self
                .count(&config["MaximumRetryAttempts"])?
                .unwrap_or(DEFAULT_ASYNC_RETRIES),
            max_event_age: Duration::from_secs(
                self.count(&config["MaximumEventAgeInSeconds"])?
                    .unwrap_or(DEFAULT_EVENT_AGE_SECONDS),
            ),
            on_failure: self.on_failure(&config["DestinationConfig"])?,
        })
    }

    /// `DestinationConfig: {OnFailure: {Type: SQS, Destination: !GetAtt Queue.Arn}}`: the queue's logical id.
    fn on_failure(&self, config: &Value) -> Result<Option<String>, String> {
        self.only(config, &["OnFailure"])?;
        let on_failure = &config["OnFailure"];
        if on_failure.is_null() {
            return Ok(None);
        }
        self.only(on_failure, &["Type", "Destination"])?;
        match self.text(&on_failure["Type"])?.as_deref() {
            Some("SQS") => self.logical_id(&on_failure["Destination"], "Destination").map(Some),
            other => Err(format!(
                "{}: an on-failure destination of type {other:?} is not emulated locally",
                self.at
            )),
        }
    }

    /// `FunctionResponseTypes`: `[ReportBatchItemFailures]` or nothing.
    fn item_failures(&self, p: &Value) -> Result<bool, String> {
        let types = p["FunctionResponseTypes"].as_sequence().cloned().unwrap_or_default();
        match types.iter().map(Value::as_str).collect::<Vec<_>>().as_slice() {
            [] => Ok(false),
            [Some("ReportBatchItemFailures")] => Ok(true),
            other => Err(format!(
                "{}: FunctionResponseTypes {other:?} is not emulated locally",
                self.at
            )),
        }
    }

    /// The resource `!Ref X` or `!GetAtt X.Attribute` names: `X`.
    fn logical_id(&self, value: &Value, what: &str) -> Result<String, String> {
        let named = intrinsic(value).and_then(|(function, argument)| match (function.as_str(), argument) {
            ("Ref", Value::String(name)) => Some(name.clone()),
            ("Fn::GetAtt", Value::String(dotted)) => dotted.split('.').next().map(str::to_owned),
            ("Fn::GetAtt", Value::Sequence(parts)) => parts.first().and_then(Value::as_str).map(str::to_owned),
            _ => None,
        });
        named.ok_or_else(|| format!("{}: {what} names no resource of the template", self.at))
    }

    /// A value resolved to its text; `None` when absent or `AWS::NoValue`.
    fn text(&self, value: &Value) -> Result<Option<String>, String> {
        if value.is_null() {
            return Ok(None);
        }
        let resolved = self.scope.resolve(value).map_err(|why| format!("{}: {why}", self.at))?;
        Ok(resolved.and_then(|v| match v {
            Value::String(s) => Some(s),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }))
    }

    fn needed(&self, value: &Value, what: &str) -> Result<String, String> {
        self.text(value)?.ok_or_else(|| format!("{}: no {what}", self.at))
    }

    fn count(&self, value: &Value) -> Result<Option<u64>, String> {
        self.text(value)?
            .map(|t| {
                t.parse()
                    .map_err(|_| format!("{}: {t} is no count of seconds or items", self.at))
            })
            .transpose()
    }

    /// A number where -1 means unlimited (`None`), as the stream mapping's retries and record age.
    fn signed(&self, value: &Value) -> Result<Option<u64>, String> {
        match self.text(value)?.as_deref() {
            None | Some("-1") => Ok(None),
            Some(_) => self.count(value),
        }
    }
}

/// The period of a `rate(value unit)` expression (`minute(s)`, `hour(s)`, `day(s)`); anything else is an
/// error naming it.
pub fn rate(expression: &str) -> Result<Duration, String> {
    let refused = || format!("the schedule expression {expression:?} is not emulated locally (only rate(...))");
    let inner = expression
        .strip_prefix("rate(")
        .and_then(|e| e.strip_suffix(')'))
        .ok_or_else(refused)?;
    let (value, unit) = inner.trim().split_once(' ').ok_or_else(refused)?;
    let value: u64 = value.parse().map_err(|_| refused())?;
    // Scheduler's grammar: the singular for 1, the plural otherwise.
    let seconds = match (value, unit) {
        (1, "minute") => 60,
        (1, "hour") => 3_600,
        (1, "day") => 86_400,
        (2.., "minutes") => 60,
        (2.., "hours") => 3_600,
        (2.., "days") => 86_400,
        _ => return Err(refused()),
    };
    Ok(Duration::from_secs(value * seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's template at its parameters' defaults.
    fn read(template: &Template, function: &str) -> Result<Option<FunctionTriggers>, String> {
        template.triggers(function, &Stack::default())
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
        let Trigger::HttpApi { auth, path, .. } = event(&intake, "Webhook") else {
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
            Trigger::HttpApi {
                auth: RouteAuth::Iam,
                ..
            }
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
            Trigger::Schedule { delivery_retries: 3, dead_letter: Some(dlq), period, .. }
                if dlq == "ScheduleDlq" && *period == Duration::from_secs(60)
        ));
        let events = read(&template, "CheckoutEventsFunction")
            .expect("events")
            .expect("in the stack");
        assert_eq!(
            event(&events, "PaymentEvents"),
            &Trigger::Queue {
                queue: "PaymentEventsQueue".into(),
                batch_size: 10,
                item_failures: true,
                max_concurrency: None
            }
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
        let bridge = template
            .triggers(function, &stack)
            .expect("read")
            .expect("in the stack");
        assert!(matches!(event(&bridge, "StripeEvents"), Trigger::Queue { queue, .. } if queue == "StripeEventsQueue"));
    }

    #[test]
    fn the_http_apis_throttling_is_read_per_route() {
        let template = Template::from_repo().expect("infra/template.yaml");
        let api = template.http_api("HttpApi", &Stack::default()).expect("HttpApi");
        assert_eq!(
            api.throttle("GET", "/payments/{id}"),
            Some(Throttle {
                rate: 100.0,
                burst: 200
            })
        );
        assert_eq!(
            api.throttle("POST", "/webhooks/{provider}"),
            Some(Throttle { rate: 50.0, burst: 100 })
        );
        let mut cors = Template::from_repo().expect("infra/template.yaml");
        cors.doc_mut()["Resources"]["HttpApi"]["Properties"]["CorsConfiguration"] = Value::from(true);
        let err = cors
            .http_api("HttpApi", &Stack::default())
            .expect_err("CorsConfiguration");
        assert!(
            err.contains("HttpApi: the property CorsConfiguration is not emulated"),
            "{err}"
        );
    }

    #[test]
    fn a_reservation_given_as_a_parameter_is_read() {
        let template = Template::from_repo().expect("infra/template.yaml");
        let mut stack = Stack::default();
        stack.parameters.insert("WebhookReservedConcurrency".into(), "7".into());
        let intake = template
            .triggers("WebhookIntakeFunction", &stack)
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

    #[test]
    fn rates_as_scheduler_writes_them() {
        assert_eq!(rate("rate(1 minute)"), Ok(Duration::from_secs(60)));
        assert_eq!(rate("rate(5 minutes)"), Ok(Duration::from_secs(300)));
        assert_eq!(rate("rate(10 minutes)"), Ok(Duration::from_secs(600)));
        assert_eq!(rate("rate(2 hours)"), Ok(Duration::from_secs(7_200)));
        assert_eq!(rate("rate(1 day)"), Ok(Duration::from_secs(86_400)));
        for refused in [
            "cron(0 12 * * ? *)",
            "at(2026-12-04T20:00:00)",
            "rate(1 minutes)",
            "rate(5 minute)",
            "rate(x minutes)",
        ] {
            let err = rate(refused).expect_err(refused);
            assert!(err.contains(refused) && err.contains("not emulated"), "{err}");
        }
    }
}
