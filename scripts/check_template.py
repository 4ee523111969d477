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
- the table has deletion protection, and a CloudWatch dashboard exists.

`--self-test` mutates the template in memory once per rule and checks that each mutation is caught, so a
check that cannot fail does not go unnoticed. Exit status 1 on any finding.
"""
import copy
import json
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
        if table.get("Properties", {}).get("DeletionProtectionEnabled") is not True:
            findings.append(f"table: {name} has no deletion protection")
    return findings


def check_dashboard(doc):
    dashboards = resources(doc, "AWS::CloudWatch::Dashboard")
    if not dashboards:
        return ["dashboard: the template has no AWS::CloudWatch::Dashboard"]
    return [f"dashboard: {n} has no DashboardBody" for n, d in dashboards.items()
            if not d.get("Properties", {}).get("DashboardBody")]


CHECKS = [check_alarm_topics, check_public_route, check_tracing, check_visibility, check_table_statements,
          check_dashboard]


def check(doc):
    return [finding for c in CHECKS for finding in c(doc)]


def _first_statement_on_table(doc):
    for fn in resources(doc, "AWS::Serverless::Function").values():
        for policy in fn["Properties"].get("Policies", []):
            for st in policy.get("Statement", []):
                if st.get("Resource") == {"Fn::GetAtt": ["PaymentsTable", "Arn"]}:
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
    ("a second public route", lambda d: d["Resources"]["SyncFinalizeFunction"]["Properties"]["Events"]["GetPayment"]
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
    ("no dashboard", lambda d: d["Resources"].pop("OperationsDashboard"), "dashboard"),
]


def self_test(doc):
    if check(doc):
        return ["self-test: the template itself has findings"]
    failures = []
    for what, mutate, word in MUTATIONS:
        mutated = copy.deepcopy(doc)
        mutate(mutated)
        findings = check(mutated)
        if not any(word in f for f in findings):
            failures.append(f"self-test: '{what}' was not caught (findings: {findings})")
    return failures


def main(argv):
    path = Path(argv[argv.index("--template") + 1]) if "--template" in argv else TEMPLATE
    doc = load(path)
    findings = check(doc)
    if not findings and "--self-test" in argv:
        findings = self_test(doc)
    for f in findings:
        print(f"FAIL {f}", file=sys.stderr)
    if findings:
        return 1
    extra = f", and each of {len(MUTATIONS)} mutations of it is caught" if "--self-test" in argv else ""
    print(f"check_template: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} passes every rule{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
