#!/usr/bin/env python3
"""Reads infra/template.yaml as an AWS operator would and fails on what would break silently in AWS.

cfn-lint and `sam validate` check that the template is well-formed; they do not know that CloudWatch cannot
publish to a topic under the AWS-managed SNS key, or that an SQS event source whose visibility timeout is
shorter than six times its function's timeout hands batches out twice. Each check below is one such rule
(issue 13, "How it is checked"):

- every alarm's topic is encrypted with a customer-managed key of this template whose policy lets
  cloudwatch.amazonaws.com use it (kms:Decrypt and kms:GenerateDataKey*);
- the HTTP API authorizes with IAM by default, the webhook route is the only route without it, the stage and
  that route are throttled, its function has reserved concurrency, access logs are on;
- `Tracing: Active` on every function (Globals resolved) and tracing on every REST API (HTTP APIs have no
  X-Ray integration, so for them the functions' active tracing is the whole trace);
- each SQS event source's queue has a visibility timeout of at least six times its function's timeout
  (Globals and the CloudFormation defaults resolved);
- every IAM statement on the table itself carries a dynamodb:LeadingKeys condition;
- the table has deletion protection, from a parameter (a literal true would refuse a failed first deploy's
  rollback), and a CloudWatch dashboard exists;
- stage isolation (two stages in one account): every explicit name (table, functions, queues, log groups,
  topic, key alias, API, schedules, roles, ...) is built from ${Stage}, every alarm and the dashboard are named;
  an alarm or dashboard metric in a custom namespace selects Stage = the Stage parameter (SEARCH expressions
  too), one in AWS/* selects a resource of this template;
- an alarm for every failure: each function's Errors, the public route's function's Throttles, the HTTP API's
  5xx, the oldest due payment and saga (breaching when missing), the saga failure rate; every schedule retries
  and dead-letters to an encrypted queue of this template whose depth alarms;
- a first deploy that can fail and be retried: nothing with a fixed name is plainly Retain (RetainExceptOnCreate),
  the table is RetainExceptOnCreate / UpdateReplacePolicy Retain, no parameter defaults to a placeholder
  (.example), with the defaults no function reserves concurrency (a new account allows none) and the webhook
  providers' livemode is true in stage prod and false in dev;
- safe rollouts: the money-path functions (but the once-every-5-minutes reconciler) publish an alias shifted
  gradually by default, rolled back on their new version's own Errors alarm and nothing else (no backlog, no
  old version's, no alarm shared with another function: any would roll back the deploy that fixes it), by a
  CodeDeploy role of this template with no statement on every resource or on a name prefix (payments-dev-*
  is stage dev-eu's too).
- every reader of a setting gets it (issue 32): a variable the template gives one function that
  docs/CONFIGURATION.md says reads it, it gives every such function (Globals and its own Environment);
- scheduled runs as Lambda runs them (EventBridge Scheduler invokes asynchronously): EventInvokeConfig with
  MaximumRetryAttempts 0, MaximumEventAgeInSeconds within the schedule's period, failed runs to an alarmed queue;
- on the template as CloudFormation receives it (SAM's expansion, `expand`; issue 42): every queue an
  EventBridge rule feeds (a target or a target's DLQ) allows the rule and denies sqs:SendMessage to every other
  principal, and every alarm on an AWS/* metric selects it by a set of dimensions AWS documents for that
  metric (DOCUMENTED_DIMENSIONS), with the values AWS publishes (a queue's name, not its URL; a custom-bus
  rule's name, not its `bus|rule` Ref): an alarm on a metric nobody publishes never fires;
- samconfig.toml, as the SAM CLI reads it: every deploy environment states TableDeletionProtection=true (an
  update sends UsePreviousValue for a parameter left out, so a first deploy's false would stay).

Options: `--template FILE`, `--samconfig FILE`. `--self-test` mutates the template (and samconfig's
environments) in memory once per rule and checks that each mutation is caught, so a
check that cannot fail does not go unnoticed. Exit status 1 on any finding.
"""
import copy
import json
import logging
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "infra" / "template.yaml"

# CloudFormation defaults when a property is absent.
DEFAULT_LAMBDA_TIMEOUT = 3
DEFAULT_VISIBILITY_TIMEOUT = 30
# AWS: "set the source queue's visibility timeout to at least six times the timeout of your function".
VISIBILITY_FACTOR = 6


class _Loader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form tags turned into their long form ({"Ref": ...}, {"Fn::...": ...})."""


def _tag(loader, suffix, node):
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_Loader.add_multi_constructor("!", _tag)


def load(path=TEMPLATE):
    return yaml.load(path.read_text(), Loader=_Loader)


# The SAM expansion's fixed region and account; parameters without a default get a value of their allowed form.
REGION, ACCOUNT = "us-east-1", "123456789012"
SAMPLE_PARAMETERS = {
    "WebhookSecretsArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:payments/webhooks-AbCdEf",
    "PspApiKeyArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:payments/psp-AbCdEf",
    "OrchestratorRoleArn": f"arn:aws:iam::{ACCOUNT}:role/orchestrator",
    # The EventBridge way in, as the webhook-intake catch-up test names its source (GRANTED_SOURCE).
    "StripePartnerEventSource": "aws.partner/stripe.com/ed_test_catchupcheck",
}


def expand(doc):
    """The CloudFormation template SAM makes of `doc` (a copy), without network access: what CloudFormation
    receives, with the resources SAM adds (roles, versions, aliases, permissions, event source mappings)."""
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    doc = copy.deepcopy(doc)
    for res in doc.get("Resources", {}).values():
        if res.get("Type") == "AWS::Serverless::Function":
            # SAM wants an S3 location; `sam build` puts one there.
            res.setdefault("Properties", {})["CodeUri"] = "s3://bucket/code.zip"
    logging.disable(logging.WARNING)
    session = boto3.session.Session(region_name=REGION)
    translator = Translator({}, Parser(), boto_session=session)
    return translator.translate(doc, parameter_values=dict(SAMPLE_PARAMETERS), get_managed_policy_map=dict)


def resources(doc, *types):
    return {name: r for name, r in doc.get("Resources", {}).items() if r.get("Type") in types}


def ref_name(value):
    """The logical id a Ref or GetAtt points at, else None."""
    if isinstance(value, dict):
        if "Ref" in value:
            return value["Ref"]
        if "Fn::GetAtt" in value:
            return value["Fn::GetAtt"][0]
    return None


def as_list(value):
    return value if isinstance(value, list) else [value]


def function_setting(doc, function, key, default):
    """A function's property, else the Globals' value, else CloudFormation's default."""
    props = function.get("Properties", {})
    if key in props:
        return props[key]
    return doc.get("Globals", {}).get("Function", {}).get(key, default)


def statements(doc):
    """Every IAM statement of the template, with where it is: SAM function policies and IAM resources."""
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        for policy in as_list(fn.get("Properties", {}).get("Policies", [])):
            if isinstance(policy, dict) and "Statement" in policy:
                for st in as_list(policy["Statement"]):
                    yield name, st
    for name, res in resources(doc, "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role").items():
        props = res.get("Properties", {})
        docs = [props.get("PolicyDocument")] + [p.get("PolicyDocument") for p in props.get("Policies", [])]
        for d in filter(None, docs):
            for st in as_list(d.get("Statement", [])):
                yield name, st


def unwrap_if(statement):
    """A statement written as !If [cond, statement, AWS::NoValue]: the statement it grants when on."""
    if isinstance(statement, dict) and "Fn::If" in statement:
        return statement["Fn::If"][1]
    return statement


def is_table_resource(resource, tables):
    """True for the table itself (not its indexes or stream, where LeadingKeys does not apply)."""
    if resource == "*":
        return True
    if isinstance(resource, dict):
        if "Fn::GetAtt" in resource:
            return resource["Fn::GetAtt"][0] in tables and resource["Fn::GetAtt"][1] == "Arn"
        if "Ref" in resource:
            return resource["Ref"] in tables
        if "Fn::Sub" in resource:
            text = resource["Fn::Sub"] if isinstance(resource["Fn::Sub"], str) else resource["Fn::Sub"][0]
            return any(text.startswith("${%s.Arn}" % t) and "/index/" not in text and "/stream/" not in text
                       for t in tables)
    return False


def check_alarm_topics(doc):
    findings = []
    keys = resources(doc, "AWS::KMS::Key")
    topics = resources(doc, "AWS::SNS::Topic")
    alarms = resources(doc, "AWS::CloudWatch::Alarm")
    if not alarms:
        findings.append("alarms: the template has no alarm")
    used = set()
    for name, alarm in alarms.items():
        actions = alarm["Properties"].get("AlarmActions", [])
        if not actions:
            findings.append(f"alarms: {name} notifies no one (no AlarmActions)")
        for action in actions:
            topic = ref_name(action)
            if topic not in topics:
                findings.append(f"alarms: {name} notifies {action!r}, not a topic of this template")
            used.add(topic)
    for topic in sorted(t for t in used if t in topics):
        key = ref_name(topics[topic]["Properties"].get("KmsMasterKeyId"))
        if key not in keys:
            findings.append(f"alarms: topic {topic} is not encrypted with a customer-managed key of this template "
                            "(CloudWatch cannot publish to a topic under alias/aws/sns)")
            continue
        allowed = set()
        for st in as_list(keys[key]["Properties"].get("KeyPolicy", {}).get("Statement", [])):
            principal = st.get("Principal", {})
            services = as_list(principal.get("Service", [])) if isinstance(principal, dict) else []
            if st.get("Effect") == "Allow" and "cloudwatch.amazonaws.com" in services:
                allowed.update(as_list(st.get("Action", [])))
        for needed in ("kms:Decrypt", "kms:GenerateDataKey*"):
            if needed not in allowed and "kms:*" not in allowed:
                findings.append(f"alarms: key {key} of topic {topic} does not allow cloudwatch.amazonaws.com {needed}")
    return findings


def http_routes(doc):
    """(function, route key, authorizer) of every HttpApi event."""
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        for event in fn.get("Properties", {}).get("Events", {}).values():
            if event.get("Type") == "HttpApi":
                p = event.get("Properties", {})
                auth = p.get("Auth", {}).get("Authorizer")
                yield name, f'{p.get("Method", "ANY").upper()} {p.get("Path")}', auth


def check_public_route(doc):
    findings = []
    apis = resources(doc, "AWS::Serverless::HttpApi")
    if not apis:
        return ["api: no AWS::Serverless::HttpApi"]
    for api_name, api in apis.items():
        props = api.get("Properties", {})
        if props.get("Auth", {}).get("DefaultAuthorizer") != "AWS_IAM":
            findings.append(f"api: {api_name} does not use IAM as its default authorizer")
        default = props.get("DefaultRouteSettings", {})
        if "ThrottlingRateLimit" not in default or "ThrottlingBurstLimit" not in default:
            findings.append(f"api: {api_name}'s stage is not throttled (DefaultRouteSettings rate and burst)")
        if "DestinationArn" not in props.get("AccessLogSettings", {}):
            findings.append(f"api: {api_name} writes no access logs")
        else:
            fmt = props["AccessLogSettings"].get("Format", "")
            try:
                json.loads(fmt.replace("\n", ""))
            except (TypeError, ValueError):
                findings.append(f"api: {api_name}'s access log format is not JSON")
    public = [(fn, route) for fn, route, auth in http_routes(doc) if auth == "NONE"]
    if [route for _, route in public] != ["POST /webhooks/{provider}"]:
        findings.append(f"api: the webhook route must be the only route without IAM, found {public}")
    settings = {}
    for api in apis.values():
        settings.update(api.get("Properties", {}).get("RouteSettings", {}))
    functions = resources(doc, "AWS::Serverless::Function")
    for fn, route in public:
        limits = settings.get(route, {})
        if "ThrottlingRateLimit" not in limits or "ThrottlingBurstLimit" not in limits:
            findings.append(f"api: public route {route} has no throttling of its own (RouteSettings)")
        if "ReservedConcurrentExecutions" not in functions[fn].get("Properties", {}):
            findings.append(f"api: {fn} serves the public route {route} without reserved concurrency")
    return findings


def check_tracing(doc):
    findings = []
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        if function_setting(doc, fn, "Tracing", "PassThrough") != "Active":
            findings.append(f"tracing: {name} is not `Tracing: Active`")
    for name, fn in resources(doc, "AWS::Lambda::Function").items():
        if fn.get("Properties", {}).get("TracingConfig", {}).get("Mode") != "Active":
            findings.append(f"tracing: {name} is not traced actively")
    for name, api in resources(doc, "AWS::Serverless::Api").items():
        enabled = api.get("Properties", {}).get("TracingEnabled",
                                                 doc.get("Globals", {}).get("Api", {}).get("TracingEnabled"))
        if enabled is not True:
            findings.append(f"tracing: REST API {name} has no TracingEnabled")
    return findings


def check_visibility(doc):
    findings = []
    queues = resources(doc, "AWS::SQS::Queue")
    sources = 0
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        timeout = int(function_setting(doc, fn, "Timeout", DEFAULT_LAMBDA_TIMEOUT))
        for event_name, event in fn.get("Properties", {}).get("Events", {}).items():
            if event.get("Type") != "SQS":
                continue
            sources += 1
            queue = ref_name(event.get("Properties", {}).get("Queue"))
            if queue not in queues:
                findings.append(f"visibility: {name}.{event_name} reads a queue not in this template; cannot check")
                continue
            visibility = int(queues[queue].get("Properties", {}).get("VisibilityTimeout", DEFAULT_VISIBILITY_TIMEOUT))
            if visibility < VISIBILITY_FACTOR * timeout:
                findings.append(f"visibility: {queue} has a visibility timeout of {visibility} s, under "
                                f"{VISIBILITY_FACTOR} x {name}'s timeout of {timeout} s")
    if sources == 0:
        findings.append("visibility: no SQS event source found (the check would pass on nothing)")
    return findings


def check_table_statements(doc):
    findings = []
    tables = set(resources(doc, "AWS::DynamoDB::Table"))
    seen = 0
    for where, st in statements(doc):
        st = unwrap_if(st)
        if not isinstance(st, dict) or st.get("Effect") != "Allow":
            continue
        actions = [a for a in as_list(st.get("Action", [])) if isinstance(a, str)]
        if not any(a.startswith("dynamodb:") or a == "*" for a in actions):
            continue
        # Stream reads have no partition key; dynamodb:ListStreams and friends are not item access.
        if all(a in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
                     "dynamodb:ListStreams") for a in actions):
            continue
        if not any(is_table_resource(r, tables) for r in as_list(st.get("Resource", []))):
            continue
        seen += 1
        condition = st.get("Condition", {})
        keys = [v.get("dynamodb:LeadingKeys") for op, v in condition.items()
                if op.startswith("ForAllValues:") and isinstance(v, dict)]
        if not any(keys):
            findings.append(f"least privilege: {where} statement {st.get('Sid', '?')} reaches the whole table "
                            "(no ForAllValues dynamodb:LeadingKeys condition)")
    if seen == 0:
        findings.append("least privilege: no IAM statement on the table found (the check would pass on nothing)")
    for name, table in resources(doc, "AWS::DynamoDB::Table").items():
        if table.get("Properties", {}).get("DeletionProtectionEnabled") in (None, False):
            findings.append(f"table: {name} has no deletion protection")
        # A literal true also refuses the DeleteTable of a failed first deploy's rollback: the retry then
        # fails on "already exists". A parameter lets the first deploy create it unprotected.
        if table.get("Properties", {}).get("DeletionProtectionEnabled") is True:
            findings.append(f"table: {name}'s deletion protection is always on, so a failed first deploy's "
                            "rollback cannot delete it (turn it on from a parameter after the first deploy)")
        # On by default: a deploy that forgets the parameter (a first `--guided` run of a stage saves every
        # answer) must not switch a live table's protection off; only a first create overrides it, once.
        protected = resolve(table.get("Properties", {}).get("DeletionProtectionEnabled"), default_params(doc),
                            doc.get("Conditions", {}))
        if str(protected).lower() != "true":
            findings.append(f"table: {name}'s deletion protection is {protected!r} with the parameters' defaults: "
                            "a deploy that does not pass it switches a live table's protection off")
    return findings


def check_dashboard(doc):
    dashboards = resources(doc, "AWS::CloudWatch::Dashboard")
    if not dashboards:
        return ["dashboard: the template has no AWS::CloudWatch::Dashboard"]
    return [f"dashboard: {n} has no DashboardBody" for n, d in dashboards.items()
            if not d.get("Properties", {}).get("DashboardBody")]


# ---- stage isolation (issue 24) ------------------------------------------------------------------------------
STAGE = "Stage"
# The explicit name property of each resource type: two stages in one account need them all to differ.
NAME_PROPERTIES = {
    "AWS::DynamoDB::Table": "TableName", "AWS::Serverless::SimpleTable": "TableName",
    "AWS::Serverless::Function": "FunctionName", "AWS::Lambda::Function": "FunctionName",
    "AWS::SQS::Queue": "QueueName", "AWS::SNS::Topic": "TopicName", "AWS::KMS::Alias": "AliasName",
    "AWS::CloudWatch::Alarm": "AlarmName", "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::Logs::LogGroup": "LogGroupName", "AWS::IAM::Role": "RoleName", "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::Serverless::HttpApi": "Name", "AWS::Serverless::Api": "Name", "AWS::ApiGatewayV2::Api": "Name",
    "AWS::Scheduler::Schedule": "Name", "AWS::Scheduler::ScheduleGroup": "Name", "AWS::Events::Rule": "Name",
    "AWS::CodeDeploy::Application": "ApplicationName", "AWS::CodeDeploy::DeploymentGroup": "DeploymentGroupName",
    "AWS::S3::Bucket": "BucketName", "AWS::SecretsManager::Secret": "Name",
    "AWS::StepFunctions::StateMachine": "StateMachineName", "AWS::Serverless::StateMachine": "Name",
}
# Named even though CloudFormation would generate a name: a generated alarm or dashboard name does not say
# which stage pages or is shown.
NAME_REQUIRED = ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard")
SCHEDULE_EVENTS = ("ScheduleV2", "Schedule")


def stage_scoped(value):
    """True for a name built from the Stage parameter (!Sub "...${Stage}..." or a Join with !Ref Stage)."""
    if not isinstance(value, dict):
        return False
    if "Fn::Sub" in value:
        text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
        return "${%s}" % STAGE in text
    if "Fn::Join" in value:
        return {"Ref": STAGE} in value["Fn::Join"][1]
    return value == {"Ref": STAGE}


def explicit_names(doc):
    """(where, name property, value or None when absent but required) of every name in the template."""
    known = set(NAME_PROPERTIES.values())
    for name, res in doc.get("Resources", {}).items():
        props, kind = res.get("Properties", {}), res.get("Type")
        keys = [NAME_PROPERTIES[kind]] if kind in NAME_PROPERTIES else [k for k in props if k in known]
        for key in keys:
            if key in props or kind in NAME_REQUIRED:
                yield name, key, props.get(key)
        for event_name, event in props.get("Events", {}).items():
            # SAM names a schedule after its event unless told otherwise: the same name in every stage.
            if event.get("Type") in SCHEDULE_EVENTS and not event.get("Properties", {}).get("OmitName"):
                yield f"{name}.{event_name} ({event['Type']})", "Name", event.get("Properties", {}).get("Name")


def metric_specs(alarm):
    """(namespace, dimensions) of every metric an alarm reads: its own, or each MetricStat of its math."""
    props = alarm.get("Properties", {})
    if "MetricName" in props:
        yield props.get("Namespace", ""), props.get("Dimensions", [])
    for m in props.get("Metrics", []):
        metric = m.get("MetricStat", {}).get("Metric")
        if metric:
            yield metric.get("Namespace", ""), metric.get("Dimensions", [])


def refs_in(value):
    """The logical ids (and parameters) a value refers to: Ref (SAM's `Fn.Version` / `Fn.Alias` as `Fn`),
    GetAtt, ${X} / ${X.Attr} in a Sub, and those inside other intrinsics (Fn::Select, Fn::Split, ...)."""
    name = ref_name(value)
    if name:
        return {name.split(".")[0]}
    if isinstance(value, dict) and "Fn::Sub" in value:
        text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
        return {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text)}
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith("Fn::"):
        return refs_in(next(iter(value.values())))
    if isinstance(value, list):
        return set().union(*(refs_in(v) for v in value))
    return set()


def partner_bus(doc, where):
    """True for a partner event bus: EventBridge requires it to be named after its partner event source, which
    the partner creates per destination (Stripe: one per stage's event destination), so it is stage-scoped by
    what it names."""
    props = doc.get("Resources", {}).get(where, {}).get("Properties", {})
    return (doc.get("Resources", {}).get(where, {}).get("Type") == "AWS::Events::EventBus"
            and "EventSourceName" in props and props.get("Name") == props["EventSourceName"])


def check_stage_names(doc):
    findings = []
    for where, key, value in explicit_names(doc):
        if not stage_scoped(value) and not partner_bus(doc, where):
            findings.append(f"stage: {where}'s {key} {value!r} is not stage-scoped (!Sub with ${{{STAGE}}}): "
                            "two stages in one account would collide or mix")
    return findings


def check_alarm_stage(doc):
    findings = []
    own = set(doc.get("Resources", {}))
    for name, alarm in resources(doc, "AWS::CloudWatch::Alarm").items():
        for namespace, dims in metric_specs(alarm):
            dims = {d.get("Name"): d.get("Value") for d in dims}
            if not namespace.startswith("AWS/"):
                if dims.get(STAGE) != {"Ref": STAGE}:
                    findings.append(f"stage: alarm {name} reads {namespace} without the Stage dimension = "
                                    "!Ref Stage (it would watch every stage's metric)")
            elif not dims or not all(refs_in(v) & own for v in dims.values()):
                findings.append(f"stage: alarm {name} reads {namespace} by {dims!r}, not by a resource of this "
                                "template (it would watch another stage's)")
    findings += check_dashboard_stage(doc)
    return findings


def dashboard_rows(body):
    """Each metric row of a dashboard body (the !Sub text with ${Stage} as __STAGE__, other refs as
    __REF_<id>__), with "." resolved from the row before; expression rows as they are."""
    text = body if isinstance(body, str) else body[0]
    text = text.replace("${%s}" % STAGE, "__STAGE__")
    # A Number parameter as a bare JSON value (an annotation at an alarm's threshold): a number once substituted.
    text = re.sub(r":\s*\$\{[^}!\"]+\}", ": 0", text)
    text = re.sub(r"\$\{([^}!]+)\}", lambda m: "__REF_%s__" % m.group(1).split(".")[0], text)
    for widget in json.loads(text).get("widgets", []):
        previous = []
        for row in widget.get("properties", {}).get("metrics", []):
            plain = [v for v in row if isinstance(v, str)]
            if plain:
                plain = [previous[i] if v == "." and i < len(previous) else v for i, v in enumerate(plain)]
                previous = plain
            yield plain, [v for v in row if isinstance(v, dict)]


def check_dashboard_stage(doc):
    findings = []
    own = set(doc.get("Resources", {}))
    for name, dashboard in resources(doc, "AWS::CloudWatch::Dashboard").items():
        body = dashboard.get("Properties", {}).get("DashboardBody", {})
        body = body.get("Fn::Sub") if isinstance(body, dict) else body
        try:
            rows = list(dashboard_rows(body))
        except (TypeError, ValueError, AttributeError) as e:
            findings.append(f"stage: dashboard {name}'s body is not a JSON !Sub text ({e})")
            continue
        for plain, options in rows:
            for expression in (o.get("expression", "") for o in options):
                if "SEARCH(" in expression and (not re.search(r"\{[^}]*\bStage\b[^}]*\}", expression)
                                                or 'Stage="__STAGE__"' not in expression):
                    findings.append(f"stage: dashboard {name}'s SEARCH {expression!r} does not select "
                                    'Stage="${Stage}"')
            if len(plain) < 2:
                continue
            dims = dict(zip(plain[2::2], plain[3::2]))
            if not plain[0].startswith("AWS/"):
                if dims.get(STAGE) != "__STAGE__":
                    findings.append(f"stage: dashboard {name} shows {plain[0]} {plain[1]} without Stage = ${{Stage}}")
            elif not dims or not all(v.startswith("__REF_") and v[6:-2] in own for v in dims.values()):
                findings.append(f"stage: dashboard {name} shows {plain[0]} {plain[1]} by {dims!r}, not by a "
                                "resource of this template")
    return findings


# ---- an alarm for every failure (issue 24) ---------------------------------------------------------------------
# The metrics (namespace, name) that must be alarmed, and why; the two lags also alarm when they go missing.
REQUIRED_CUSTOM_ALARMS = {
    ("Payments/Recovery", "RecoveryLagSeconds"): "recovery not getting through (and a silent reconciler)",
    ("Payments/Checkout", "SweeperLagSeconds"): "the sweeper not getting through (and a silent sweeper)",
    ("Payments/Recovery", "OldestOpenPaymentAgeSeconds"): "a payment open too long",
    ("Payments/Recovery", "Expired"): "payments expired with nothing to ask their PSP",
    ("Payments/Checkout", "OldestOpenSagaAgeSeconds"): "a checkout saga open too long",
    ("Payments/Checkout", "SagasCompensated"): "the saga failure rate",
    ("Payments/Psp", "PspRefusals"): "requests Stripe refuses (a setting it does not accept)",
    ("Payments/Psp", "PspAuthFailed"): "Stripe refusing our API key",
    ("Payments/Psp", "PspRateLimited"): "a PSP's rate limit binding (429): the budgets above its limit",
    ("Payments/Finalize", "RefundsFailed"): "refunds Stripe reports failed (money to give back again)",
    ("Payments/Recovery", "RefundsForOperator"): "money only a person can return (refunds failed past the bound)",
    ("Payments/Recovery", "CapturesFailed"): "captured payments whose capture the card scheme rejected",
    ("Payments/Finalize", "DisputesOpened"): "a customer disputing a charge (days to answer it)",
}
MUST_BREACH_WHEN_MISSING = ("RecoveryLagSeconds", "SweeperLagSeconds")
# An open item's age is published only by a run that reads it, and a backed-off item is read again at most
# this many seconds later (plus one run): an age alarm must take the Maximum over at least that long, or an
# item backed off past the period is missing from it. shared/src/store/open_index.rs MAX_RECHECK_INTERVAL
# (6 h) for payments; functions/checkout-saga/src/sweeper.rs MAX_SAGA_RECHECK (5 min) and one sweep for sagas;
# shared/recovery/src/back_off.rs OPERATOR_RECHECK (30 min) and one run for a payment that waits for a person.
AGE_ALARM_LEAST_PERIOD = {"OldestOpenPaymentAgeSeconds": 6 * 3600, "OldestOpenSagaAgeSeconds": 6 * 60,
                          "RefundsForOperator": 3600, "CapturesFailed": 3600}


def metric_stats(props, metric):
    """(period, statistic) of each read of `metric` in an alarm's properties (plain or metric math)."""
    if props.get("MetricName") == metric:
        yield props.get("Period", 0), props.get("Statistic")
    for m in props.get("Metrics", []):
        if m.get("MetricStat", {}).get("Metric", {}).get("MetricName") == metric:
            yield m["MetricStat"].get("Period", 0), m["MetricStat"].get("Stat")


def alarm_index(doc):
    """(alarm, namespace, metric name, {dimension: referenced logical id}) of every metric every alarm reads."""
    for name, alarm in resources(doc, "AWS::CloudWatch::Alarm").items():
        props = alarm.get("Properties", {})
        specs = [(props.get("Namespace", ""), props.get("MetricName"), props.get("Dimensions", []))]
        specs += [(m["MetricStat"]["Metric"].get("Namespace", ""), m["MetricStat"]["Metric"].get("MetricName"),
                   m["MetricStat"]["Metric"].get("Dimensions", []))
                  for m in props.get("Metrics", []) if "MetricStat" in m]
        for namespace, metric, dims in specs:
            if metric:
                yield name, namespace, metric, {d.get("Name"): ref_name(d.get("Value")) for d in dims}


def has_alarm(index, namespace, metric, dimension=None, target=None):
    return [a for a, ns, m, dims in index
            if ns == namespace and m == metric and (dimension is None or dims.get(dimension) == target)]


def check_failure_alarms(doc):
    findings = []
    index = list(alarm_index(doc))
    alarms = resources(doc, "AWS::CloudWatch::Alarm")
    for fn in resources(doc, "AWS::Serverless::Function", "AWS::Lambda::Function"):
        if not has_alarm(index, "AWS/Lambda", "Errors", "FunctionName", fn):
            findings.append(f"failures: {fn} has no Errors alarm (AWS/Lambda, FunctionName = !Ref {fn})")
    functions = resources(doc, "AWS::Serverless::Function", "AWS::Lambda::Function")
    for fn, route, auth in http_routes(doc):
        throttled = has_alarm(index, "AWS/Lambda", "Throttles", "FunctionName", fn)
        if auth == "NONE" and not throttled:
            findings.append(f"failures: {fn} serves the public route {route} and has no Throttles alarm")
        # A reserved concurrency on a function behind a route binds at a peak (issue 44): it is alarmed.
        reserved = "ReservedConcurrentExecutions" in functions.get(fn, {}).get("Properties", {})
        if reserved and not throttled:
            findings.append(f"failures: {fn} serves {route} with a reserved concurrency and has no Throttles alarm")
    for api in resources(doc, "AWS::Serverless::HttpApi", "AWS::ApiGatewayV2::Api"):
        if not has_alarm(index, "AWS/ApiGateway", "5xx", "ApiId", api):
            findings.append(f"failures: HTTP API {api} has no 5xx alarm (AWS/ApiGateway, ApiId = !Ref {api})")
    for (namespace, metric), what in REQUIRED_CUSTOM_ALARMS.items():
        found = has_alarm(index, namespace, metric)
        if not found:
            findings.append(f"failures: no alarm reads {namespace} {metric} ({what})")
        if metric in MUST_BREACH_WHEN_MISSING and found and not any(
                alarms[a]["Properties"].get("TreatMissingData") == "breaching" for a in found):
            findings.append(f"failures: the alarm on {metric} does not treat missing data as breaching "
                            "(a scanner that stopped reporting would look healthy)")
        least = AGE_ALARM_LEAST_PERIOD.get(metric)
        for alarm in found if least else []:
            for period, stat in metric_stats(alarms[alarm]["Properties"], metric):
                if stat != "Maximum" or not isinstance(period, int) or period < least:
                    findings.append(f"failures: {alarm} reads {metric} as {stat} over {period} s, not the Maximum "
                                    f"over at least {least} s (an item backed off past the period is not in it)")
    findings += check_schedules(doc, index)
    findings += check_async_invokes(doc, index)
    return findings


def schedules(doc):
    """(where, properties with RetryPolicy and DeadLetterConfig) of every SAM schedule event and Scheduler schedule."""
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        for event_name, event in fn.get("Properties", {}).get("Events", {}).items():
            if event.get("Type") in SCHEDULE_EVENTS:
                yield f"{name}.{event_name}", event.get("Properties", {})
    for name, schedule in resources(doc, "AWS::Scheduler::Schedule").items():
        yield name, schedule.get("Properties", {}).get("Target", {})


def check_schedules(doc, index):
    findings = []
    queues = resources(doc, "AWS::SQS::Queue")
    for where, props in schedules(doc):
        if not props.get("RetryPolicy"):
            findings.append(f"failures: schedule {where} has no RetryPolicy")
        queue = ref_name(props.get("DeadLetterConfig", {}).get("Arn")) or props.get("DeadLetterConfig", {}).get(
            "QueueLogicalId")
        if queue not in queues:
            findings.append(f"failures: schedule {where} has no DeadLetterConfig to a queue of this template")
            continue
        queue_props = queues[queue].get("Properties", {})
        if not (queue_props.get("SqsManagedSseEnabled") or queue_props.get("KmsMasterKeyId")):
            findings.append(f"failures: the DLQ {queue} of schedule {where} is not encrypted")
        if not has_alarm(index, "AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", queue):
            findings.append(f"failures: the DLQ {queue} of schedule {where} has no depth alarm "
                            "(ApproximateNumberOfMessagesVisible)")
    return findings



RATE_UNITS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}


def rate_seconds(expression):
    """The period of `rate(N unit)`, else None (a cron has no fixed period)."""
    match = re.fullmatch(r"rate\((\d+) (\w+)\)", str(expression))
    return int(match.group(1)) * RATE_UNITS[match.group(2)] if match and match.group(2) in RATE_UNITS else None


def check_async_invokes(doc, index):
    """Scheduler invokes asynchronously, so Lambda retries a failed run (twice by default, the event kept up to
    6 hours) and its queue holds throttled runs: no retry (the next run is the retry), no event older than the
    period (runs would pile up and overlap), and failed or expired runs on an alarmed queue of this template."""
    findings = []
    queues = resources(doc, "AWS::SQS::Queue")
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        periods = [rate_seconds(e.get("Properties", {}).get("ScheduleExpression"))
                   for e in fn.get("Properties", {}).get("Events", {}).values() if e.get("Type") in SCHEDULE_EVENTS]
        if not periods:
            continue
        config = function_setting(doc, fn, "EventInvokeConfig", {}) or {}
        if config.get("MaximumRetryAttempts") != 0:
            findings.append(f"schedules: {name}'s EventInvokeConfig MaximumRetryAttempts is "
                            f"{config.get('MaximumRetryAttempts', 'unset (Lambda: 2)')}, not 0: a failed run is "
                            "retried beside the next one")
        age, period = config.get("MaximumEventAgeInSeconds"), min(p or 0 for p in periods)
        if not isinstance(age, int) or not period or age > period:
            findings.append(f"schedules: {name}'s EventInvokeConfig MaximumEventAgeInSeconds ({age or 'unset: 6 h'}) "
                            f"is not within its schedule's period ({period} s): throttled runs pile up")
        target = config.get("DestinationConfig", {}).get("OnFailure", {})
        queue = ref_name(target.get("Destination"))
        if target.get("Type") != "SQS" or queue not in queues:
            findings.append(f"schedules: {name}'s EventInvokeConfig has no OnFailure destination to a queue of "
                            "this template: a failed run leaves no trace but its Errors")
        elif not has_alarm(index, "AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", queue):
            findings.append(f"schedules: {name}'s on-failure queue {queue} has no depth alarm")
    return findings

# ---- a deploy that can fail and be retried (issue 24) ----------------------------------------------------------
NO_VALUE = object()


def resolve(value, params, conditions):
    """A value with the parameters' values and the conditions applied (Ref, Fn::If, simple Fn::Sub);
    AWS::NoValue is NO_VALUE; what refers to a resource is returned as it is."""
    if isinstance(value, dict) and len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Ref":
            return NO_VALUE if arg == "AWS::NoValue" else params.get(arg, value)
        if fn == "Fn::If":
            chosen = arg[1] if condition(arg[0], params, conditions) else arg[2]
            return resolve(chosen, params, conditions)
        if fn == "Fn::Sub" and isinstance(arg, str):
            return re.sub(r"\$\{([^}!]+)\}", lambda m: str(params.get(m.group(1), m.group(0))), arg)
    return value


def condition(name, params, conditions):
    def truth(expr):
        (fn, arg), = expr.items()
        if fn == "Fn::Equals":
            return str(resolve(arg[0], params, conditions)) == str(resolve(arg[1], params, conditions))
        if fn == "Fn::Not":
            return not truth(arg[0])
        if fn == "Fn::And":
            return all(truth(a) for a in arg)
        if fn == "Fn::Or":
            return any(truth(a) for a in arg)
        if fn == "Condition":
            return condition(arg, params, conditions)
        raise ValueError(f"condition function {fn} not understood")
    return truth(conditions[name])


def default_params(doc, **overrides):
    """Every parameter's default (a placeholder for those without one), with overrides."""
    params = {n: str(p.get("Default", "placeholder")) for n, p in doc.get("Parameters", {}).items()}
    params.update(overrides)
    return params


def check_retryable_deploy(doc):
    findings = []
    named = {name for name, _, value in explicit_names(doc) if value is not None and "." not in name}
    for name, res in doc.get("Resources", {}).items():
        if res.get("DeletionPolicy") == "Retain" and name in named:
            findings.append(f"deploy: {name} has a fixed name and DeletionPolicy Retain: a failed first deploy "
                            "leaves it behind and every retry fails with 'already exists' (RetainExceptOnCreate)")
    for name, table in resources(doc, "AWS::DynamoDB::Table").items():
        if (table.get("DeletionPolicy"), table.get("UpdateReplacePolicy")) != ("RetainExceptOnCreate", "Retain"):
            findings.append(f"deploy: table {name} must outlive the stack but not a failed first deploy "
                            "(DeletionPolicy RetainExceptOnCreate, UpdateReplacePolicy Retain)")
    for name, param in doc.get("Parameters", {}).items():
        if re.search(r"\.example\b|\bexample\.(com|org|net)\b", str(param.get("Default", ""))):
            findings.append(f"deploy: parameter {name} defaults to a placeholder ({param['Default']}): a stack "
                            "that deploys but does not work")
    findings += check_default_settings(doc)
    return findings


def function_variable(doc, fn, variable, params):
    value = fn.get("Properties", {}).get("Environment", {}).get("Variables", {}).get(variable)
    return resolve(value, params, doc.get("Conditions", {}))


def check_default_settings(doc):
    """With the defaults: no reserved concurrency (a new account's limit of 10 allows none), and the
    webhook providers' livemode is the stage's (prod live, other stages test)."""
    findings = []
    conditions = doc.get("Conditions", {})
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        reserved = resolve(fn.get("Properties", {}).get("ReservedConcurrentExecutions", NO_VALUE),
                           default_params(doc), conditions)
        if reserved is not NO_VALUE:
            findings.append(f"deploy: {name} reserves concurrency {reserved} by default, which a new account "
                            "(limit 10, 100 must stay unreserved) refuses: default to no reservation")
    intakes = [fn for fn in resources(doc, "AWS::Serverless::Function").values()
               if "WEBHOOK_PROVIDERS" in fn.get("Properties", {}).get("Environment", {}).get("Variables", {})]
    if not intakes:
        return findings + ["deploy: no function reads WEBHOOK_PROVIDERS (the livemode check would pass on nothing)"]
    for stage, live in (("prod", True), ("dev", False)):
        value = function_variable(doc, intakes[0], "WEBHOOK_PROVIDERS", default_params(doc, Stage=stage))
        try:
            modes = [p.get("livemode") for p in json.loads(value)]
        except (TypeError, ValueError, AttributeError):
            modes = [value]
        if not modes or any(m is not live for m in modes):
            findings.append(f"deploy: with the defaults, stage {stage}'s webhook providers have livemode "
                            f"{modes}, not {live}: live mode must follow the stage")
    return findings


# ---- a charge Stripe accepts (issue 23) ------------------------------------------------------------------------
REDIRECT_CHOICES = {"PspRedirects": ["never", "allowed"]}


def check_psp_redirects(doc):
    """Every function that calls the PSP (PSP_BASE_URL) gets, for every value of PspRedirects, exactly one of
    PSP_REDIRECTS=never or a PSP_RETURN_URL (Stripe refuses a confirm with neither; the function refuses to
    start with neither or both)."""
    findings = []
    conditions = doc.get("Conditions", {})
    choices = doc.get("Parameters", {}).get("PspRedirects", {}).get("AllowedValues", [None])
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        variables = fn.get("Properties", {}).get("Environment", {}).get("Variables", {})
        if "PSP_BASE_URL" not in variables:
            continue
        for choice in choices:
            params = default_params(doc, PspReturnUrl="https://shop.test/return")
            if choice is not None:
                params["PspRedirects"] = choice
            get = lambda v: resolve(variables.get(v, NO_VALUE), params, conditions)  # noqa: E731
            redirects, url = get("PSP_REDIRECTS"), get("PSP_RETURN_URL")
            url_set = isinstance(url, str) and url.startswith("https://")
            never = redirects == "never"
            if never == url_set:
                findings.append(f"psp: {name} gets PSP_REDIRECTS={redirects if redirects is not NO_VALUE else '-'} "
                                f"and PSP_RETURN_URL {'set' if url_set else 'unset'} with PspRedirects={choice}: "
                                "it needs exactly one of PSP_REDIRECTS=never or a return URL (Stripe refuses a "
                                "confirm with neither)")
    return findings


# ---- safe rollouts (issue 24) ------------------------------------------------------------------------------------
# The money-path functions a canary can judge: each is invoked many times within the canary's minutes. Not
# the reconciler: it runs once every 5 minutes, so its canary would see at most one run (template comment).
MONEY_PATH = ("PaymentsApiFunction", "WebhookIntakeFunction", "CheckoutApiFunction", "CheckoutEventsFunction",
              "OutboxRelayFunction")
GRADUAL = ("Canary", "Linear")


BATCH_ITEMS = ("Payments/BatchItems", "FailedItems")


def version_scoped(alarm, fn, short=None):
    """True when every metric the alarm reads is of the version of `fn` this deploy publishes (SAM's
    fn.Version): AWS/Lambda's with FunctionName = fn and ExecutedVersion, or the code's per-version
    FailedItems (Payments/BatchItems) with Function = its short name, Version and the Stage."""
    def one(namespace, dims):
        version = f"{fn}.Version" in json.dumps(dims.get("Version" if namespace == BATCH_ITEMS[0] else
                                                         "ExecutedVersion"))
        if namespace == BATCH_ITEMS[0]:
            return version and dims.get("Function") == short and ref_name(dims.get(STAGE)) == STAGE
        return namespace == "AWS/Lambda" and ref_name(dims.get("FunctionName")) == fn and version
    specs = list(metric_specs(alarm))
    return bool(specs) and all(one(ns, {d.get("Name"): d.get("Value") for d in ds}) for ns, ds in specs)


def reports_item_failures(fn):
    """The function answers its stream or queue per item (ReportBatchItemFailures): it never fails an
    invocation for a failed record, so its Errors cannot show a version that fails them all."""
    return any("ReportBatchItemFailures" in as_list(e.get("Properties", {}).get("FunctionResponseTypes", []))
               for e in fn.get("Properties", {}).get("Events", {}).values())


def check_rollback_alarms(doc, name, wanted, alarms, index):
    """A canary rolls back on its new version's own failures alone: not on the function's old versions, a
    backlog, or another function's metrics (any of which would roll back the deploy that fixes it); and a
    function that answers per item rolls back on its new version's failed items too."""
    findings = []
    short = {v: k for k, v in short_names(doc).items()}.get(name)
    for alarm in wanted:
        if not version_scoped(alarms[alarm], name, short):
            findings.append(f"rollout: {name} rolls back on {alarm}, which is not about {name}'s new version "
                            "alone (a backlog, the old version's or another function's failures would roll "
                            "back the deploy that fixes them)")
    errors = set(has_alarm(index, "AWS/Lambda", "Errors", "FunctionName", name))
    if not set(wanted) & errors:
        findings.append(f"rollout: {name}'s DeploymentPreference does not roll back on its new version's Errors alarm")
    failed_items = set(has_alarm(index, *BATCH_ITEMS))
    if reports_item_failures(resources(doc, "AWS::Serverless::Function")[name]) and not set(wanted) & failed_items:
        findings.append(f"rollout: {name} reports failed items per record (its Errors stay 0), but its "
                        "DeploymentPreference does not roll back on its new version's FailedItems")
    return findings


def prefix_wildcards(resource):
    """The strings of an IAM Resource that end a name in `*` (payments-dev-* also matches payments-dev-eu-...)."""
    texts = [r.get("Fn::Sub") if isinstance(r, dict) else r for r in as_list(resource)]
    texts = [t if isinstance(t, str) else t[0] for t in texts if t]
    return [t for t in texts if re.search(r"[^:/]\*", t)]


def check_rollouts(doc):
    findings = []
    functions = resources(doc, "AWS::Serverless::Function")
    alarms = resources(doc, "AWS::CloudWatch::Alarm")
    roles = resources(doc, "AWS::IAM::Role")
    index = list(alarm_index(doc))
    for name in MONEY_PATH:
        if name not in functions:
            findings.append(f"rollout: money-path function {name} is missing")
            continue
        fn = functions[name]
        if not function_setting(doc, fn, "AutoPublishAlias", None):
            findings.append(f"rollout: {name} has no AutoPublishAlias (nothing to shift gradually or roll back)")
        pref = function_setting(doc, fn, "DeploymentPreference", {}) or {}
        kind = resolve(pref.get("Type"), default_params(doc), doc.get("Conditions", {}))
        if not (isinstance(kind, str) and kind.startswith(GRADUAL)):
            findings.append(f"rollout: {name}'s DeploymentPreference is not a canary or linear shift by default "
                            f"({kind!r})")
        wanted = [ref_name(a) for a in pref.get("Alarms", [])]
        if not wanted or any(a not in alarms for a in wanted):
            findings.append(f"rollout: {name}'s DeploymentPreference has no alarms of this template to roll back on")
        else:
            findings += check_rollback_alarms(doc, name, wanted, alarms, index)
        role = ref_name(pref.get("Role"))
        if role not in roles:
            findings.append(f"rollout: {name}'s DeploymentPreference has no Role of this template (SAM would "
                            "attach AWSCodeDeployRoleForLambda, whose statements reach every resource)")
        elif any(unwrap_if(st).get("Resource") == "*" for where, st in statements(doc) if where == role):
            findings.append(f"rollout: CodeDeploy role {role} grants on every resource (*)")
    codedeploy_roles = {ref_name(function_setting(doc, fn, "DeploymentPreference", {}).get("Role"))
                        for fn in functions.values() if function_setting(doc, fn, "DeploymentPreference", None)}
    for where, st in statements(doc):
        if where in codedeploy_roles:
            for text in prefix_wildcards(unwrap_if(st).get("Resource")):
                findings.append(f"rollout: CodeDeploy role {where} reaches {text!r} by a name prefix (stage "
                                "dev's payments-dev-* is stage dev-eu's too): name the exact ARNs")
    return findings


# ---- leases outlive the function that holds them ----------------------------------------------------------------
def check_lease_settings(doc):
    """Every function's FUNCTION_TIMEOUT_SECONDS is its Lambda Timeout, and its LEASE_TTL_SECONDS (a parameter's
    smallest allowed value) exceeds it: `shared::Config` refuses to start otherwise (a lease that could expire
    while its holder still runs lets a second writer in), which no local run shows, as the local stack sets
    neither."""
    findings = []
    params = {n: str(p.get("MinValue", p.get("Default", "placeholder"))) for n, p in doc.get("Parameters", {}).items()}
    conditions = doc.get("Conditions", {})
    globals_vars = doc.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        timeout = int(function_setting(doc, fn, "Timeout", DEFAULT_LAMBDA_TIMEOUT))
        env = dict(globals_vars, **fn.get("Properties", {}).get("Environment", {}).get("Variables", {}))
        declared = resolve(env.get("FUNCTION_TIMEOUT_SECONDS"), params, conditions)
        ttl = resolve(env.get("LEASE_TTL_SECONDS"), params, conditions)
        if str(declared) != str(timeout):
            findings.append(f"leases: {name} declares FUNCTION_TIMEOUT_SECONDS {declared}, but its Timeout is "
                            f"{timeout} s")
        if not str(ttl).isdigit() or int(ttl) <= timeout:
            findings.append(f"leases: {name}'s LEASE_TTL_SECONDS ({ttl}) does not exceed its timeout of "
                            f"{timeout} s: the function refuses to start")
    return findings


# ---- every reader of a setting gets it from the template (issue 32) ----------------------------------------------
CONFIG_DOC = ROOT / "docs" / "CONFIGURATION.md"
CHECKOUT_FUNCTIONS = {"checkout-api", "checkout-events", "checkout-sweeper"}


def short_names(doc):
    """{function's short name (payments-${Stage}-<name>): logical id}."""
    names = {}
    for name, fn in resources(doc, "AWS::Serverless::Function").items():
        full = fn.get("Properties", {}).get("FunctionName", {})
        match = re.fullmatch(r"payments-\$\{Stage\}-([a-z0-9-]+)", str(full.get("Fn::Sub", "")))
        if match:
            names[match.group(1)] = name
    return names


def documented_readers(text, names):
    """{variable: the functions (short names) docs/CONFIGURATION.md says read it}: a row's first cell names the
    variables, its second the readers, a function by its `name` or as "every function" / "the checkout functions"."""
    readers = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        found = {n for n in names if f"`{n}`" in cells[1]}
        if "every function" in cells[1]:
            found |= set(names)
        if "the checkout functions" in cells[1]:
            found |= CHECKOUT_FUNCTIONS & set(names)
        for variable in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
            readers.setdefault(variable, set()).update(found)
    return readers


def check_setting_readers(doc, text=None):
    """A setting the template gives one of its readers it gives every reader: a reader left out runs on the
    code's built-in default in AWS (the payments API without WEBHOOK_PROVIDERS accepted `standard`, for which
    the stack has no endpoint), which no local run shows, as every local function gets the same variables.
    Variables the template gives no function (Lambda's own, the SDK's, local-only ones) are not its to set."""
    text = CONFIG_DOC.read_text() if text is None else text
    names = short_names(doc)
    globals_vars = doc.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    functions = resources(doc, "AWS::Serverless::Function")
    env = {short: set(globals_vars) | set(functions[name].get("Properties", {}).get("Environment", {})
                                          .get("Variables", {}))
           for short, name in names.items()}
    findings = []
    for variable, readers in sorted(documented_readers(text, names).items()):
        given = {short for short, variables in env.items() if variable in variables}
        for short in sorted(readers - given if given else set()):
            findings.append(f"settings: {names[short]} reads {variable} (docs/CONFIGURATION.md) but the template "
                            f"gives it only to {', '.join(sorted(names[g] for g in given))}: in AWS it runs on the "
                            "built-in default")
    return findings



# ---- a webhook URL per provider (issue 32) ------------------------------------------------------------------------
WEBHOOK_SCHEMES = {"stripe": None, "adyen": "HasAdyen"}


def check_webhook_outputs(doc):
    """An output per provider the stack can be configured with (Stripe always, Adyen where its client is
    configured) and the base URL every other provider's name is appended to: a deployer registers the URL the
    outputs name, and `WebhookUrl` alone named Stripe's."""
    findings = []
    urls = {}
    for name, output in doc.get("Outputs", {}).items():
        text = json.dumps(output.get("Value"))
        for path in re.findall(r"/webhooks/([a-z0-9_-]*)\"", text):
            urls.setdefault(path, []).append((name, output.get("Condition")))
    for scheme, wanted in [("", None), *WEBHOOK_SCHEMES.items()]:
        found = urls.get(scheme, [])
        what = f"/webhooks/{scheme}" if scheme else "the base /webhooks/ (for any other provider's name)"
        if not found:
            findings.append(f"outputs: no output names {what}")
        elif any(condition != wanted for _, condition in found):
            findings.append(f"outputs: {what} is output under {found}, not under condition {wanted}")
    return findings


# ---- checks of the template as CloudFormation receives it (the SAM expansion; issue 42) ------------------------
def rule_arn(rule):
    return {"Fn::GetAtt": [rule, "Arn"]}


def rule_fed_queues(cfn):
    """{queue: {rules}} of every SQS queue of the template an EventBridge rule sends to (a target or a
    target's dead-letter queue)."""
    queues = resources(cfn, "AWS::SQS::Queue")
    fed = {}
    for name, rule in resources(cfn, "AWS::Events::Rule").items():
        for target in rule.get("Properties", {}).get("Targets", []):
            for arn in (target.get("Arn"), target.get("DeadLetterConfig", {}).get("Arn")):
                if isinstance(arn, dict) and "Fn::GetAtt" in arn and arn["Fn::GetAtt"][0] in queues:
                    fed.setdefault(arn["Fn::GetAtt"][0], set()).add(name)
    return fed


def covers(value, wanted):
    """True when an IAM Action or Resource (a string, an intrinsic or a list of them) includes `wanted`."""
    return any(v == wanted or v == "*" or (isinstance(v, str) and isinstance(wanted, str) and v.endswith(":*")
                                            and wanted.startswith(v[:-1]))
               for v in as_list(value))


def everyone(principal):
    return principal == "*" or (isinstance(principal, dict) and as_list(principal.get("AWS")) == ["*"]
                                and len(principal) == 1)


def check_rule_fed_queues(cfn):
    """A queue an EventBridge rule feeds takes sqs:SendMessage from that rule alone. Its consumer trusts what
    it reads (webhook-eventbridge checks the envelope's source and account, which anyone can write), so an
    Allow for events.amazonaws.com is not enough: any principal of the account whose own policy grants
    sqs:SendMessage could post a `payment_intent.succeeded` of its choice. The policy must deny SendMessage
    to every principal unless aws:SourceArn is one of the rules that feed the queue (an explicit Deny wins over
    every Allow, identity policies included)."""
    findings = []
    fed = rule_fed_queues(cfn)
    if not fed:
        return ["queues: no SQS queue is the target of an EventBridge rule (the check would pass on nothing)"]
    policies = resources(cfn, "AWS::SQS::QueuePolicy")
    for queue, rules in sorted(fed.items()):
        arn, sources = {"Fn::GetAtt": [queue, "Arn"]}, [rule_arn(r) for r in sorted(rules)]
        named = ", ".join(sorted(rules))
        sts = [st for p in policies.values() if {"Ref": queue} in as_list(p["Properties"].get("Queues", []))
               for st in as_list(p["Properties"].get("PolicyDocument", {}).get("Statement", []))]
        if not sts:
            findings.append(f"queues: {queue} is fed by rule {named} but no AWS::SQS::QueuePolicy of this "
                            "template applies to it")
            continue
        sends = [st for st in sts if covers(st.get("Action"), "sqs:SendMessage") and covers(st.get("Resource"), arn)]
        allowed = [st for st in sends if st.get("Effect") == "Allow"
                   and "events.amazonaws.com" in as_list((st.get("Principal") or {}).get("Service", []))
                   and all(v in sources for v in as_list(st.get("Condition", {}).get("ArnEquals", {})
                                                         .get("aws:SourceArn", [None])))]
        if not allowed:
            findings.append(f"queues: rule {named} cannot send to {queue} (no Allow of sqs:SendMessage to "
                            "events.amazonaws.com with ArnEquals aws:SourceArn = the rule)")
        denied = [st for st in sends if st.get("Effect") == "Deny" and everyone(st.get("Principal"))
                  and st.get("Condition") == {"ArnNotEquals": {"aws:SourceArn": sources if len(sources) > 1
                                                               else sources[0]}}]
        if not denied:
            findings.append(f"queues: {queue} is fed by rule {named}, but its policy has no explicit Deny of "
                            f"sqs:SendMessage to every principal (\"*\") unless aws:SourceArn is {named} "
                            "(ArnNotEquals and nothing else): any role of the account with sqs:SendMessage can "
                            "post an envelope its consumer trusts")
    return findings


# The dimensions each AWS metric an alarm reads is published with, as AWS documents them: an alarm on any other
# set watches a metric that does not exist and never fires (INSUFFICIENT_DATA, or OK under notBreaching).
# A metric not listed here fails the check until its documented sets are added, with their page.
LAMBDA_SETS = [set(), {"FunctionName"}, {"FunctionName", "Resource"}, {"FunctionName", "Resource", "ExecutedVersion"}]
HTTP_API_SETS = [{"ApiId"}, {"ApiId", "Stage"}, {"ApiId", "Stage", "Route"}]
DOCUMENTED_DIMENSIONS = {
    # docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics.html (by function, by resource: version or
    # alias, by executed version of an alias; none: all functions)
    **{("AWS/Lambda", m): LAMBDA_SETS for m in ("Errors", "Throttles", "Invocations", "Duration", "IteratorAge",
                                                 "ConcurrentExecutions")},
    # docs.aws.amazon.com/apigateway/latest/developerguide/http-api-metrics.html (Route with detailed metrics only)
    **{("AWS/ApiGateway", m): HTTP_API_SETS for m in ("4xx", "5xx", "Count", "Latency", "IntegrationLatency")},
    # docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
    **{("AWS/SQS", m): [{"QueueName"}] for m in ("ApproximateNumberOfMessagesVisible",
                                                   "ApproximateAgeOfOldestMessage")},
    # docs.aws.amazon.com/eventbridge/latest/userguide/eb-monitoring.html: "Metrics that specify only the
    # RuleName dimension refer to the default event bus. Metrics that specify both the EventBusName and
    # RuleName dimensions refer to a custom event bus." (chosen per rule below)
    **{("AWS/Events", m): "by the rule's bus" for m in ("FailedInvocations", "Invocations",
                                                         "InvocationsFailedToBeSentToDlq")},
    # docs.aws.amazon.com/amazondynamodb/latest/developerguide/metrics-dimensions.html: ReadThrottleEvents and
    # WriteThrottleEvents by TableName, or by TableName and GlobalSecondaryIndexName for an index's throttles
    **{("AWS/DynamoDB", m): [{"TableName"}, {"TableName", "GlobalSecondaryIndexName"}]
       for m in ("ReadThrottleEvents", "WriteThrottleEvents")},
}


def rule_on_custom_bus(cfn, rule):
    bus = cfn.get("Resources", {}).get(rule, {}).get("Properties", {}).get("EventBusName", "default")
    return bus != "default"


def rule_name_part(value, index):
    """The rule a value names as Fn::Select [index, Fn::Split ["|", Ref rule]], else None."""
    if isinstance(value, dict) and list(value) == ["Fn::Select"]:
        i, of = value["Fn::Select"]
        if str(i) == str(index) and isinstance(of, dict) and list(of) == ["Fn::Split"] and of["Fn::Split"][0] == "|":
            return ref_name(of["Fn::Split"][1]) if "Ref" in of["Fn::Split"][1] else None
    return None


def dimension_value_findings(cfn, alarm, dims):
    """What each dimension value is in AWS, where the template's value is not it: `Ref` of a queue is its URL,
    not its name; `Ref` of a rule on a custom bus is `bus|rule`, not the rule's name."""
    findings = []
    types = {n: r.get("Type") for n, r in cfn.get("Resources", {}).items()}
    for key, value in dims.items():
        if key == "QueueName" and types.get(ref_name(value)) == "AWS::SQS::Queue" and "Ref" in value:
            findings.append(f"alarm dimensions: {alarm}'s QueueName is !Ref {value['Ref']}, the queue's URL "
                            "(!GetAtt <queue>.QueueName is its name)")
        if key == "RuleName" and isinstance(value, dict) and "Ref" in value and rule_on_custom_bus(cfn, value["Ref"]):
            findings.append(f"alarm dimensions: {alarm}'s RuleName is !Ref {value['Ref']}, which for a rule on a "
                            "custom bus is `bus|rule`: no metric has that name (!Select [1, !Split [\"|\", "
                            "!Ref <rule>]] is the rule's name)")
        if key == "EventBusName" and rule_name_part(value, 0) != rule_name_part(dims.get("RuleName"), 1):
            findings.append(f"alarm dimensions: {alarm}'s EventBusName is not the bus of the rule its RuleName "
                            "names (!Select [0, !Split [\"|\", !Ref <rule>]])")
    return findings


def check_alarm_dimensions(cfn):
    """Every alarm on an AWS namespace selects its metric by a documented set of dimensions, with values that
    are what AWS publishes: an alarm that reads a metric nobody publishes can never fire."""
    findings = []
    for name, alarm in resources(cfn, "AWS::CloudWatch::Alarm").items():
        props = alarm.get("Properties", {})
        reads = [(props.get("Namespace", ""), props.get("MetricName"), props.get("Dimensions", []))]
        reads += [(m["MetricStat"]["Metric"].get("Namespace", ""), m["MetricStat"]["Metric"].get("MetricName"),
                   m["MetricStat"]["Metric"].get("Dimensions", [])) for m in props.get("Metrics", []) if "MetricStat" in m]
        for namespace, metric, dims in reads:
            if not metric or not namespace.startswith("AWS/"):
                continue
            dims = {d.get("Name"): d.get("Value") for d in dims}
            documented = DOCUMENTED_DIMENSIONS.get((namespace, metric))
            if documented is None:
                findings.append(f"alarm dimensions: {name} reads {namespace} {metric}, whose documented dimensions "
                                "are not in scripts/check_template.py's DOCUMENTED_DIMENSIONS: add them from AWS's "
                                "page")
                continue
            if documented == "by the rule's bus":
                rule = ref_name(dims.get("RuleName")) or rule_name_part(dims.get("RuleName"), 1)
                documented = [{"EventBusName", "RuleName"} if rule_on_custom_bus(cfn, rule) else {"RuleName"}]
            if set(dims) not in documented:
                findings.append(f"alarm dimensions: {name} reads {namespace} {metric} by {sorted(dims)}, not a "
                                f"documented set ({' or '.join(str(sorted(s)) for s in documented)}): it never fires")
            findings += dimension_value_findings(cfn, name, dims)
    return findings



# ---- samconfig.toml's deploy environments (issue 42) --------------------------------------------------------
SAMCONFIG = ROOT / "samconfig.toml"


def deploy_overrides(path=SAMCONFIG):
    """{environment: {parameter: value}} of each deploy environment, read and parsed by the SAM CLI itself."""
    from samcli.cli.types import CfnParameterOverridesType
    from samcli.lib.config.samconfig import SamConfig

    config = SamConfig(str(path.parent), path.name)
    envs = [env for env, table in config.document.items() if hasattr(table, "keys") and "deploy" in table]
    return {env: CfnParameterOverridesType().convert(
        config.get_all(["deploy"], "parameters", env=env).get("parameter_overrides", ""), None, None) or {}
        for env in envs}


def check_samconfig(doc, overrides):
    """Every deploy environment states TableDeletionProtection=true. On an update `sam deploy` sends
    UsePreviousValue for a parameter its overrides leave out, so the template's default (true) never comes
    back by itself: a stage whose first deploy passed false (as docs/DEPLOY.md says, once) would stay
    unprotected. A first deploy overrides it once, in the guided run or on the command line."""
    findings = []
    if "TableDeletionProtection" not in doc.get("Parameters", {}):
        return ["samconfig: the template has no TableDeletionProtection parameter (the check would pass on nothing)"]
    if not overrides:
        return ["samconfig: samconfig.toml has no deploy environment (the check would pass on nothing)"]
    for env, params in sorted(overrides.items()):
        value = params.get("TableDeletionProtection")
        if value != "true":
            findings.append(f"samconfig: [{env}.deploy.parameters] parameter_overrides "
                            f"{'leave out' if value is None else 'set'} TableDeletionProtection"
                            f"{'' if value is None else '=' + value}: an update keeps the table's previous "
                            "protection (SAM sends UsePreviousValue), which is off after a first deploy; "
                            "state TableDeletionProtection=true")
    return findings


CFN_CHECKS = [check_rule_fed_queues, check_alarm_dimensions]


def check_expanded(cfn):
    return [finding for c in CFN_CHECKS for finding in c(cfn)]


CHECKS = [check_alarm_topics, check_public_route, check_tracing, check_visibility, check_table_statements,
          check_dashboard, check_stage_names, check_alarm_stage, check_failure_alarms, check_retryable_deploy,
          check_rollouts, check_psp_redirects, check_lease_settings, check_setting_readers,
          check_webhook_outputs]


def check(doc):
    return [finding for c in CHECKS for finding in c(doc)]


def _first_statement_on_table(doc):
    # The functions' statements live in their own roles (AWS::IAM::Role), or in SAM Policies.
    for _, st in statements(doc):
        if isinstance(st, dict) and st.get("Resource") == {"Fn::GetAtt": ["PaymentsTable", "Arn"]}:
            return st
    raise AssertionError("no statement on PaymentsTable")


def _sqs_consumer(doc):
    for fn in resources(doc, "AWS::Serverless::Function").values():
        if any(e.get("Type") == "SQS" for e in fn["Properties"].get("Events", {}).values()):
            return fn
    raise AssertionError("no SQS consumer")


def _alarm_key(doc):
    return doc["Resources"][ref_name(doc["Resources"]["AlarmTopic"]["Properties"]["KmsMasterKeyId"])]


# One mutation per rule: (what it breaks, how, a word the finding must contain).
MUTATIONS = [
    ("AWS-managed SNS key", lambda d: d["Resources"]["AlarmTopic"]["Properties"].update(KmsMasterKeyId="alias/aws/sns"),
     "customer-managed"),
    ("key policy without CloudWatch", lambda d: _alarm_key(d)["Properties"]["KeyPolicy"].update(
        Statement=[s for s in _alarm_key(d)["Properties"]["KeyPolicy"]["Statement"]
                   if "Service" not in s.get("Principal", {})]), "cloudwatch.amazonaws.com"),
    ("an alarm without actions", lambda d: d["Resources"]["PaymentAnomaliesAlarm"]["Properties"].pop("AlarmActions"),
     "notifies no one"),
    ("webhook route not throttled", lambda d: d["Resources"]["HttpApi"]["Properties"].pop("RouteSettings"),
     "no throttling"),
    ("stage not throttled", lambda d: d["Resources"]["HttpApi"]["Properties"].pop("DefaultRouteSettings"),
     "not throttled"),
    ("intake without reserved concurrency",
     lambda d: d["Resources"]["WebhookIntakeFunction"]["Properties"].pop("ReservedConcurrentExecutions"),
     "reserved concurrency"),
    ("no IAM default", lambda d: d["Resources"]["HttpApi"]["Properties"]["Auth"].pop("DefaultAuthorizer"),
     "default authorizer"),
    ("a second public route", lambda d: d["Resources"]["PaymentsApiFunction"]["Properties"]["Events"]["GetPayment"]
     ["Properties"].update(Auth={"Authorizer": "NONE"}), "only route"),
    ("no tracing in Globals", lambda d: d["Globals"]["Function"].pop("Tracing"), "Tracing: Active"),
    ("one function opts out of tracing",
     lambda d: d["Resources"]["OutboxRelayFunction"]["Properties"].update(Tracing="PassThrough"), "OutboxRelayFunction"),
    ("visibility under 6x", lambda d: d["Resources"]["PaymentEventsQueue"]["Properties"].update(VisibilityTimeout=60),
     "visibility timeout of 60"),
    ("consumer timeout from Globals", lambda d: (_sqs_consumer(d)["Properties"].pop("Timeout"),
                                                 d["Globals"]["Function"].update(Timeout=30)), "30 s"),
    ("table statement without LeadingKeys", lambda d: _first_statement_on_table(d).pop("Condition"), "LeadingKeys"),
    ("no deletion protection",
     lambda d: d["Resources"]["PaymentsTable"]["Properties"].pop("DeletionProtectionEnabled"), "deletion protection"),
    ("deletion protection that blocks a rollback",
     lambda d: d["Resources"]["PaymentsTable"]["Properties"].update(DeletionProtectionEnabled=True),
     "failed first deploy's rollback"),
    ("deletion protection off by default (before issue 32)", lambda d: d["Parameters"]["TableDeletionProtection"]
     .update(Default="false"), "with the parameters' defaults"),
    ("no dashboard", lambda d: d["Resources"].pop("OperationsDashboard"), "dashboard"),
]


def _event(d, fn, event):
    return d["Resources"][fn]["Properties"]["Events"][event]["Properties"]


def _dashboard_replace(d, old, new):
    props = d["Resources"]["OperationsDashboard"]["Properties"]
    text = props["DashboardBody"]["Fn::Sub"]
    assert old in text, old
    props["DashboardBody"] = {"Fn::Sub": text.replace(old, new)}


def _alarm(d, name):
    return d["Resources"][name]["Properties"]


def _deployment(d, fn):
    return d["Resources"][fn]["Properties"]["DeploymentPreference"]


# Issue 24's rules: stage isolation, an alarm for every failure, a retryable deploy, safe rollouts.
MUTATIONS += [
    ("a lease shorter than a function's timeout (the catch-up before this check)", lambda d: d["Resources"]
     ["WebhookCatchupFunction"]["Properties"]["Environment"]["Variables"].pop("LEASE_TTL_SECONDS"),
     "WebhookCatchupFunction's LEASE_TTL_SECONDS"),
    ("a timeout the function is not told", lambda d: d["Resources"]["ReconcilerFunction"]["Properties"].update(
        Timeout=40), "ReconcilerFunction declares FUNCTION_TIMEOUT_SECONDS"),
    ("an alarm named without the stage", lambda d: _alarm(d, "PaymentAnomaliesAlarm").update(
        AlarmName="payments-anomalies"), "PaymentAnomaliesAlarm's AlarmName"),
    ("an event bus named neither after the stage nor after its partner source", lambda d: d["Resources"]
     ["StripeEventBus"]["Properties"].update(Name="stripe-events"), "StripeEventBus's Name"),
    ("a queue named without the stage", lambda d: d["Resources"]["ScheduleDlq"]["Properties"].update(
        QueueName={"Fn::Sub": "payments-schedule-dlq"}), "ScheduleDlq's QueueName"),
    ("an alarm without a name", lambda d: _alarm(d, "RelayErrorsAlarm").pop("AlarmName"), "RelayErrorsAlarm's AlarmName"),
    ("a schedule named after its event", lambda d: _event(d, "ReconcilerFunction", "EveryFiveMinutes").pop("Name"),
     "EveryFiveMinutes (ScheduleV2)'s Name"),
    ("a custom-metric alarm without Stage", lambda d: _alarm(d, "WebhookQuarantinesAlarm").pop("Dimensions"),
     "alarm WebhookQuarantinesAlarm reads Payments/Webhooks without the Stage"),
    ("a metric-math alarm without Stage", lambda d: _alarm(d, "SagaFailureRateAlarm")["Metrics"][0]["MetricStat"]
     ["Metric"].pop("Dimensions"), "alarm SagaFailureRateAlarm reads Payments/Checkout without the Stage"),
    ("an AWS/* alarm on a literal name", lambda d: _alarm(d, "RelayErrorsAlarm")["Dimensions"][0].update(
        Value="payments-prod-outbox-relay"), "alarm RelayErrorsAlarm reads AWS/Lambda"),
    ("a dashboard SEARCH without Stage", lambda d: _dashboard_replace(
        d, 'Stage=\\"${Stage}\\" MetricName=\\"Requests\\"', 'MetricName=\\"Requests\\"'), "SEARCH"),
    ("a dashboard metric without Stage", lambda d: _dashboard_replace(
        d, '["Payments/Finalize", "Anomalies", "Stage", "${Stage}"]', '["Payments/Finalize", "Anomalies"]'),
     "shows Payments/Finalize Anomalies without Stage"),
    ("a function without an Errors alarm", lambda d: d["Resources"].pop("CheckoutSweeperErrorsAlarm"),
     "CheckoutSweeperFunction has no Errors alarm"),
    ("an Errors alarm on another function", lambda d: _alarm(d, "ReconcilerErrorsAlarm")["Dimensions"][0].update(
        Value={"Ref": "CheckoutSweeperFunction"}), "ReconcilerFunction has no Errors alarm"),
    ("the intake without a Throttles alarm", lambda d: d["Resources"].pop("WebhookIntakeThrottlesAlarm"),
     "no Throttles alarm"),
    ("checkout-api's reservation without a Throttles alarm",
     lambda d: d["Resources"].pop("CheckoutApiThrottlesAlarm"), "with a reserved concurrency and has no Throttles alarm"),
    ("the API without a 5xx alarm", lambda d: _alarm(d, "ApiServerErrorRateAlarm")["Metrics"][0]["MetricStat"]
     ["Metric"].update(MetricName="4xx"), "no 5xx alarm"),
    ("no oldest-payment alarm", lambda d: d["Resources"].pop("OldestOpenPaymentAlarm"),
     "no alarm reads Payments/Recovery OldestOpenPaymentAgeSeconds"),
    ("no oldest-saga alarm", lambda d: d["Resources"].pop("OldestOpenSagaAlarm"),
     "no alarm reads Payments/Checkout OldestOpenSagaAgeSeconds"),
    ("no recovery lag alarm", lambda d: d["Resources"].pop("RecoveryLagAlarm"),
     "no alarm reads Payments/Recovery RecoveryLagSeconds"),
    ("a silent sweeper looks healthy", lambda d: _alarm(d, "SweeperLagAlarm").update(
        TreatMissingData="notBreaching"), "missing data as breaching"),
    ("a payment age alarm shorter than the back-off", lambda d: _alarm(d, "OldestOpenPaymentAlarm")["Metrics"][0]
     ["MetricStat"].update(Period=3600), "OldestOpenPaymentAlarm reads OldestOpenPaymentAgeSeconds as Maximum over 3600 s"),
    ("a saga age alarm on the average", lambda d: _alarm(d, "OldestOpenSagaAlarm")["Metrics"][0]["MetricStat"].update(
        Stat="Average"), "OldestOpenSagaAlarm reads OldestOpenSagaAgeSeconds as Average"),
    ("no saga failure rate alarm", lambda d: d["Resources"].pop("SagaFailureRateAlarm"), "saga failure rate"),
    ("a schedule without retries", lambda d: _event(d, "CheckoutSweeperFunction", "EveryMinute").pop("RetryPolicy"),
     "no RetryPolicy"),
    ("a schedule without a DLQ", lambda d: _event(d, "ReconcilerFunction", "EveryFiveMinutes").pop("DeadLetterConfig"),
     "no DeadLetterConfig"),
    ("a schedule DLQ nobody watches", lambda d: d["Resources"].pop("ScheduleDlqNotEmptyAlarm"), "no depth alarm"),
    ("an unencrypted schedule DLQ", lambda d: d["Resources"]["ScheduleDlq"]["Properties"].pop("SqsManagedSseEnabled"),
     "is not encrypted"),
    ("the table retained on a failed create", lambda d: d["Resources"]["PaymentsTable"].update(DeletionPolicy="Retain"),
     "RetainExceptOnCreate"),
    ("a named log group retained", lambda d: d["Resources"]["ReconcilerLogGroup"].update(DeletionPolicy="Retain"),
     "ReconcilerLogGroup has a fixed name and DeletionPolicy Retain"),
    ("a placeholder default", lambda d: d["Parameters"]["PspBaseUrl"].update(Default="https://psp.example"),
     "PspBaseUrl defaults to a placeholder"),
    ("reserved concurrency by default", lambda d: d["Parameters"]["WebhookReservedConcurrency"].update(Default=20),
     "reserves concurrency 20 by default"),
    ("livemode false in prod", lambda d: d["Resources"]["WebhookIntakeFunction"]["Properties"]["Environment"]
     ["Variables"].update(WEBHOOK_PROVIDERS={"Ref": "WebhookProviders"}) or d["Parameters"]["WebhookProviders"].update(
        Default='[{"name":"stripe","scheme":"stripe","livemode":false}]'), "stage prod's webhook providers"),
    ("a money-path function without an alias",
     lambda d: d["Resources"]["OutboxRelayFunction"]["Properties"].pop("AutoPublishAlias"), "no AutoPublishAlias"),
    ("all at once by default", lambda d: d["Parameters"]["DeploymentType"].update(Default="AllAtOnce"),
     "not a canary or linear"),
    ("a rollout without alarms", lambda d: _deployment(d, "WebhookIntakeFunction").pop("Alarms"),
     "WebhookIntakeFunction's DeploymentPreference has no alarms"),
    ("a rollout blind to its own errors", lambda d: _deployment(d, "CheckoutApiFunction").update(
        Alarms=[{"Ref": "CheckoutEventsNewVersionErrorsAlarm"}]), "its new version's Errors alarm"),
    ("a rollback on a shared alarm", lambda d: _deployment(d, "CheckoutApiFunction")["Alarms"].append(
        {"Ref": "ApiServerErrorRateAlarm"}), "rolls back on ApiServerErrorRateAlarm"),
    ("a rollback on a backlog", lambda d: _deployment(d, "CheckoutEventsFunction")["Alarms"].append(
        {"Ref": "EventsDlqNotEmptyAlarm"}), "rolls back on EventsDlqNotEmptyAlarm"),
    ("a rollback on the old version's errors", lambda d: _deployment(d, "PaymentsApiFunction")["Alarms"].append(
        {"Ref": "PaymentsApiErrorsAlarm"}), "rolls back on PaymentsApiErrorsAlarm"),
    ("a rollback alarm on every version", lambda d: _alarm(d, "WebhookIntakeNewVersionErrorsAlarm")["Dimensions"].pop(),
     "rolls back on WebhookIntakeNewVersionErrorsAlarm"),
    ("a CodeDeploy role on a stage's name prefix", lambda d: d["Resources"]["CodeDeployRole"]["Properties"]["Policies"]
     [0]["PolicyDocument"]["Statement"][0].update(Resource={"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:"
                                                                      "${AWS::AccountId}:function:payments-${Stage}-*"}),
     "by a name prefix"),
    ("a rollout with SAM's managed role", lambda d: _deployment(d, "PaymentsApiFunction").pop("Role"),
     "AWSCodeDeployRoleForLambda"),
    ("a PSP function without a redirect choice", lambda d: [
        d["Resources"]["ReconcilerFunction"]["Properties"]["Environment"]["Variables"].pop(v)
        for v in ("PSP_REDIRECTS", "PSP_RETURN_URL")], "ReconcilerFunction gets PSP_REDIRECTS=-"),
    ("redirects allowed without the return URL", lambda d: d["Resources"]["CheckoutApiFunction"]["Properties"]
     ["Environment"]["Variables"].pop("PSP_RETURN_URL"), "CheckoutApiFunction gets PSP_REDIRECTS=allowed"),
    ("no alarm on PSP refusals", lambda d: d["Resources"].pop("PspRefusalsAlarm"),
     "no alarm reads Payments/Psp PspRefusals"),
    ("no alarm on a refused key", lambda d: d["Resources"].pop("PspAuthFailedAlarm"),
     "no alarm reads Payments/Psp PspAuthFailed"),
    ("no alarm on a PSP's 429s", lambda d: d["Resources"].pop("PspRateLimitedAlarm"),
     "no alarm reads Payments/Psp PspRateLimited"),
    ("no alarm on failed refunds", lambda d: d["Resources"].pop("RefundsFailedAlarm"),
     "no alarm reads Payments/Finalize RefundsFailed"),
    ("no alarm on money waiting for a person", lambda d: d["Resources"].pop("RefundsForOperatorAlarm"),
     "no alarm reads Payments/Recovery RefundsForOperator"),
    ("a for-operator alarm that goes quiet between looks", lambda d: _alarm(d, "RefundsForOperatorAlarm")
     .update(Period=300), "RefundsForOperatorAlarm reads RefundsForOperator as Maximum over 300 s"),
    ("no alarm on captures failed at the scheme", lambda d: d["Resources"].pop("CapturesFailedAlarm"),
     "no alarm reads Payments/Recovery CapturesFailed"),
    ("no alarm on disputes", lambda d: d["Resources"].pop("DisputesOpenedAlarm"),
     "no alarm reads Payments/Finalize DisputesOpened"),
    ("a reader of a setting left without it (the payments API before issue 32)", lambda d: d["Resources"]
     ["PaymentsApiFunction"]["Properties"]["Environment"]["Variables"].pop("WEBHOOK_PROVIDERS"),
     "PaymentsApiFunction reads WEBHOOK_PROVIDERS"),
    ("a saga's recovery on other settings than the reconciler's", lambda d: d["Resources"]["CheckoutSweeperFunction"]
     ["Properties"]["Environment"]["Variables"].pop("RECOVERY_STALE_AFTER_SECONDS"),
     "CheckoutSweeperFunction reads RECOVERY_STALE_AFTER_SECONDS"),
    ("Lambda's default async retries on a schedule", lambda d: d["Resources"]["ReconcilerFunction"]["Properties"]
     ["EventInvokeConfig"].pop("MaximumRetryAttempts"), "ReconcilerFunction's EventInvokeConfig MaximumRetryAttempts"),
    ("scheduled runs kept longer than the period", lambda d: d["Resources"]["CheckoutSweeperFunction"]["Properties"]
     ["EventInvokeConfig"].update(MaximumEventAgeInSeconds=120), "CheckoutSweeperFunction's EventInvokeConfig "
     "MaximumEventAgeInSeconds (120)"),
    ("a scheduled function without EventInvokeConfig", lambda d: d["Resources"]["WebhookCatchupFunction"]
     ["Properties"].pop("EventInvokeConfig"), "WebhookCatchupFunction's EventInvokeConfig has no OnFailure"),
    ("failed runs sent nowhere", lambda d: d["Resources"]["ReconcilerFunction"]["Properties"]["EventInvokeConfig"]
     .pop("DestinationConfig"), "ReconcilerFunction's EventInvokeConfig has no OnFailure"),
    ("WebhookUrl for Stripe alone (before issue 32)", lambda d: [d["Outputs"].pop(o) for o in
     ("AdyenWebhookUrl", "WebhookBaseUrl")], "no output names /webhooks/adyen"),
    ("Adyen's URL output without Adyen", lambda d: d["Outputs"]["AdyenWebhookUrl"].pop("Condition"),
     "/webhooks/adyen is output under"),
    ("a per-item canary blind to failed items (before issue 32)", lambda d: _deployment(d, "OutboxRelayFunction")
     .update(Alarms=[{"Ref": "OutboxRelayNewVersionErrorsAlarm"}]), "OutboxRelayFunction reports failed items"),
    ("a failed-items alarm on every version", lambda d: _alarm(d, "CheckoutEventsNewVersionFailedItemsAlarm")
     ["Dimensions"].pop(), "rolls back on CheckoutEventsNewVersionFailedItemsAlarm"),
    ("a failed-items alarm on another function", lambda d: _alarm(d, "OutboxRelayNewVersionFailedItemsAlarm")
     ["Dimensions"][1].update(Value="checkout-events"), "rolls back on OutboxRelayNewVersionFailedItemsAlarm"),
    ("a CodeDeploy role on every resource", lambda d: d["Resources"]["CodeDeployRole"]["Properties"]["Policies"][0]
     ["PolicyDocument"]["Statement"][1].update(Resource="*"), "grants on every resource"),
]


def _queue_policy(d):
    return d["Resources"]["StripeEventsQueuePolicy"]["Properties"]


def _queue_statement(d, sid):
    return next(st for st in _queue_policy(d)["PolicyDocument"]["Statement"] if st.get("Sid") == sid)


def _drop_queue_statement(d, sid):
    doc = _queue_policy(d)["PolicyDocument"]
    doc["Statement"] = [st for st in doc["Statement"] if st.get("Sid") != sid]


# The rules checked on the SAM expansion (issue 42): each mutation is of the source template, expanded again.
EXPANDED_MUTATIONS = [
    ("a queue policy that denies nobody (before issue 42)", lambda d: _drop_queue_statement(d, "NobodyElseSends"),
     "StripeEventsQueue is fed by rule StripeEventsRule, but its policy has no explicit Deny"),
    ("the Deny spares the DLQ", lambda d: _queue_statement(d, "NobodyElseSends").update(
        Resource={"Fn::GetAtt": ["StripeEventsQueue", "Arn"]}), "StripeEventsDlq is fed by rule StripeEventsRule"),
    ("the policy not on the DLQ", lambda d: _queue_policy(d).update(Queues=[{"Ref": "StripeEventsQueue"}]),
     "no AWS::SQS::QueuePolicy of this template applies to it"),
    ("a Deny of one role only", lambda d: _queue_statement(d, "NobodyElseSends").update(
        Principal={"AWS": "arn:aws:iam::123456789012:role/attacker"}), "has no explicit Deny"),
    ("a Deny unless another source", lambda d: _queue_statement(d, "NobodyElseSends").update(
        Condition={"ArnNotEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:123456789012:rule/other"}}),
     "has no explicit Deny"),
    ("a Deny narrowed by a second condition", lambda d: _queue_statement(d, "NobodyElseSends")["Condition"].update(
        StringEquals={"aws:PrincipalAccount": "111111111111"}), "has no explicit Deny"),
    ("the rule not allowed to send", lambda d: _drop_queue_statement(d, "StripeEventsRuleSends"),
     "rule StripeEventsRule cannot send to StripeEventsQueue"),
    ("the rule's alarm by !Ref of the rule (before issue 42)", lambda d: _alarm(
        d, "StripeEventsRuleFailedInvocationsAlarm").update(Dimensions=[{"Name": "RuleName", "Value": {
            "Ref": "StripeEventsRule"}}]), "StripeEventsRuleFailedInvocationsAlarm reads AWS/Events "
     "FailedInvocations by ['RuleName']"),
    ("the rule's alarm without its bus", lambda d: _alarm(d, "StripeEventsRuleFailedInvocationsAlarm")
     ["Dimensions"].pop(0), "not a documented set (['EventBusName', 'RuleName'])"),
    ("the rule's name as the rule's Ref", lambda d: _alarm(d, "StripeEventsRuleFailedInvocationsAlarm")
     ["Dimensions"][1].update(Value={"Ref": "StripeEventsRule"}), "which for a rule on a custom bus is `bus|rule`"),
    ("the bus's name from the wrong part", lambda d: _alarm(d, "StripeEventsRuleFailedInvocationsAlarm")
     ["Dimensions"][0]["Value"].update({"Fn::Select": [1, {"Fn::Split": ["|", {"Ref": "StripeEventsRule"}]}]}),
     "EventBusName is not the bus of the rule"),
    ("a queue alarm by the queue's URL", lambda d: _alarm(d, "StripeEventsDlqAlarm")["Dimensions"][0].update(
        Value={"Ref": "StripeEventsDlq"}), "the queue's URL"),
    ("a Lambda alarm by an undocumented dimension", lambda d: _alarm(d, "RelayErrorsAlarm")["Dimensions"].append(
        {"Name": "Stage", "Value": {"Ref": "Stage"}}), "RelayErrorsAlarm reads AWS/Lambda Errors by"),
    ("an HTTP API alarm by a REST API's dimension", lambda d: _alarm(d, "ApiServerErrorRateAlarm")["Metrics"][0]
     ["MetricStat"]["Metric"]["Dimensions"][0].update(Name="ApiName"), "ApiServerErrorRateAlarm reads AWS/ApiGateway"),
    ("an AWS metric nobody looked up", lambda d: _alarm(d, "StripeEventsDlqAlarm").update(
        MetricName="NumberOfMessagesSent"), "not in scripts/check_template.py's DOCUMENTED_DIMENSIONS"),
]


def _override(env, **params):
    return lambda o: o[env].update(params)


# samconfig.toml's deploy environments, mutated as parsed (issue 42).
SAMCONFIG_MUTATIONS = [
    ("prod leaves protection to UsePreviousValue (before issue 42)", lambda o: o["prod"].pop("TableDeletionProtection"),
     "[prod.deploy.parameters] parameter_overrides leave out TableDeletionProtection"),
    ("a first deploy's false saved by the guided run", _override("dev", TableDeletionProtection="false"),
     "[dev.deploy.parameters] parameter_overrides set TableDeletionProtection=false"),
]


def self_test(doc, overrides):
    if check(doc) or check_expanded(expand(doc)) or check_samconfig(doc, overrides):
        return ["self-test: the template itself has findings"]
    failures = []
    for what, mutate, word in SAMCONFIG_MUTATIONS:
        mutated = copy.deepcopy(overrides)
        mutate(mutated)
        findings = check_samconfig(doc, mutated)
        if not any(word in f for f in findings):
            failures.append(f"self-test: '{what}' was not caught (findings: {findings})")
    for mutations, checked in ((MUTATIONS, check), (EXPANDED_MUTATIONS, lambda d: check_expanded(expand(d)))):
        for what, mutate, word in mutations:
            mutated = copy.deepcopy(doc)
            mutate(mutated)
            findings = checked(mutated)
            if not any(word in f for f in findings):
                failures.append(f"self-test: '{what}' was not caught (findings: {findings})")
    return failures


def main(argv):
    path = Path(argv[argv.index("--template") + 1]) if "--template" in argv else TEMPLATE
    doc = load(path)
    samconfig = Path(argv[argv.index("--samconfig") + 1]) if "--samconfig" in argv else SAMCONFIG
    overrides = deploy_overrides(samconfig)
    findings = check(doc) + check_expanded(expand(doc)) + check_samconfig(doc, overrides)
    if not findings and "--self-test" in argv:
        findings = self_test(doc, overrides)
    for f in findings:
        print(f"FAIL {f}", file=sys.stderr)
    if findings:
        return 1
    count = len(MUTATIONS) + len(EXPANDED_MUTATIONS) + len(SAMCONFIG_MUTATIONS)
    extra = f", and each of {count} mutations of it is caught" if "--self-test" in argv else ""
    print(f"check_template: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} passes every rule{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
