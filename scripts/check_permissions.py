#!/usr/bin/env python3
"""Proves each function's IAM permissions from the AWS calls its code makes (issue 24, item 1).

DynamoDB Local and moto enforce no IAM, so a call the template does not grant passes every local test and
fails only in AWS; and SAM widens what the template says (managed policies with `*` resources). This check
reads both sides:

- the template as CloudFormation receives it: infra/template.yaml expanded by the SAM translator (offline:
  a fixed region and account, sample values for the parameters without default), then each function's role,
  its inline policies, the IAM policies attached to it and its managed policies, intrinsics resolved to ARNs;
- the calls: the JSON lines `local_testkit::aws_calls` appends to the file named by AWS_CALL_RECORD (function,
  service, operation, table/index/stream/queue/secret, and for DynamoDB the leading key's prefix of each
  item), in two files: the integration tests' (`--tests`) and the end-to-end runs' of the local stack (`--e2e`).

It fails when a recorded call of either file is not granted (action, resource ARN including index or stream,
the dynamodb:LeadingKeys prefix): a call made is a call that must be allowed, however it came about. Only the
integration tests' calls prove that a grant is used: they are the same on every run, while the end-to-end
traffic is random (which checkouts abandon, which payments pass their deadline), so a grant "used" only there
would turn red on an unlucky draw. It fails when a granted action or LeadingKeys pattern is used by no
integration test's call and not waived with a reason in infra/permission-waivers.yaml, when a statement has a
`*` resource and its action is not waived, when a role has an AWS managed policy attached (they grant `*`
resources: "No SAM-attached managed policy with `*` resources"), and when a waiver matches no grant.

Usage: check_permissions.py --tests FILE [--e2e FILE] [--waivers FILE] [--self-test]
(`--self-test` removes a grant the calls need and adds one they do not, in memory, and expects both caught;
and expects a grant used only by an end-to-end call reported unused, and an end-to-end call not granted
reported).
"""
import argparse
import copy
import fnmatch
import json
import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_template  # noqa: E402  (the template's YAML loader with CloudFormation's short tags)
# The SAM expansion, with its fixed region and account and the sample values of the parameters without default.
from check_template import ACCOUNT, REGION, SAMPLE_PARAMETERS, expand  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WAIVERS = ROOT / "infra" / "permission-waivers.yaml"
PARTITION = "aws"
STACK = "payments-check"
# The functions' names are `payments-${Stage}-<name>`; records use <name>.
FUNCTION_PREFIX = "payments-${Stage}-"
# Batch operations IAM checks as their single form.
SQS_ACTIONS = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
               "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}


# ---- the template, expanded (check_template.expand) ------------------------------------------------------

class Resolver:
    """Intrinsic functions resolved to the strings CloudFormation would produce (ARNs of this template's
    resources in a fixed region and account)."""

    def __init__(self, cfn):
        self.resources = cfn.get("Resources", {})
        self.params = {name: p.get("Default") for name, p in cfn.get("Parameters", {}).items()}
        self.params.update(SAMPLE_PARAMETERS)
        self.params.update({"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": PARTITION,
                            "AWS::StackName": STACK, "AWS::URLSuffix": "amazonaws.com"})
        self.conditions = cfn.get("Conditions", {})

    def condition(self, name):
        return bool(self.value(self.conditions[name]))

    def value(self, v):
        if isinstance(v, list):
            return [self.value(x) for x in v if not _no_value(x)]
        if not isinstance(v, dict):
            return v
        if len(v) != 1:
            return {k: self.value(x) for k, x in v.items() if not _no_value(x)}
        (fn, arg), = v.items()
        handler = {"Ref": self.ref, "Fn::GetAtt": self.get_att, "Fn::Sub": self.sub, "Fn::If": self.if_,
                   "Fn::Join": self.join, "Fn::Equals": self.equals, "Fn::Not": lambda a: not self.value(a[0]),
                   "Fn::And": lambda a: all(self.value(x) for x in a),
                   "Fn::Or": lambda a: any(self.value(x) for x in a),
                   "Condition": self.condition, "Fn::Select": lambda a: self.value(a[1])[int(self.value(a[0]))],
                   "Fn::Split": lambda a: self.value(a[1]).split(a[0])}.get(fn)
        return handler(arg) if handler else {fn: self.value(arg)}

    def equals(self, args):
        a, b = (self.value(x) for x in args)
        return str(a) == str(b)

    def if_(self, args):
        return self.value(args[1] if self.condition(args[0]) else args[2])

    def join(self, args):
        return args[0].join(str(x) for x in self.value(args[1]))

    def sub(self, arg):
        text, local = (arg, {}) if isinstance(arg, str) else (arg[0], self.value(arg[1]))

        def one(m):
            name = m.group(1)
            if name in local:
                return str(local[name])
            if "." in name and name.split(".", 1)[0] in self.resources:
                return str(self.get_att(name.split(".", 1)))
            return str(self.ref(name))
        return re.sub(r"\$\{([^}!]+)\}", one, text)

    def ref(self, name):
        if name in self.params:
            return self.params[name]
        res = self.resources.get(name)
        if res is None:
            return name
        kind = res.get("Type")
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self.physical(name)}"
        if kind in ("AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::IAM::Role", "AWS::Lambda::Function",
                    "AWS::SNS::Topic"):
            return self.physical(name) if kind != "AWS::SNS::Topic" else self.arn(name)
        return name

    def physical(self, name):
        props = self.resources[name].get("Properties", {})
        for key in ("TableName", "QueueName", "LogGroupName", "RoleName", "FunctionName", "TopicName"):
            if key in props:
                return self.value(props[key])
        return f"{STACK}-{name}"

    def arn(self, name):
        kind = self.resources[name].get("Type")
        physical = self.physical(name)
        return {
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{physical}",
            "AWS::SQS::Queue": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{physical}",
            "AWS::Logs::LogGroup": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{physical}:*",
            "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/{physical}",
            "AWS::Lambda::Function": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{physical}",
            "AWS::SNS::Topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:{physical}",
        }.get(kind, f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:{name}")

    def get_att(self, args):
        name, attr = args if isinstance(args, list) else args.split(".", 1)
        if name not in self.resources:
            return f"{name}.{attr}"
        if attr == "StreamArn":
            return self.arn(name) + "/stream/2024-01-01T00:00:00.000"
        if attr == "QueueName":
            return self.physical(name)
        return self.arn(name)


def _no_value(x):
    return isinstance(x, dict) and x.get("Ref") == "AWS::NoValue"


def as_list(v):
    return v if isinstance(v, list) else [v]


# ---- what each function may do ------------------------------------------------------------------------------

def functions(cfn, resolver):
    """{function name: (role logical id, [statement])} for every Lambda function of the expanded template,
    plus findings on roles this check cannot read or AWS managed policies."""
    res = cfn["Resources"]
    out, findings = {}, []
    for logical, fn in res.items():
        if fn.get("Type") != "AWS::Lambda::Function":
            continue
        props = fn["Properties"]
        name = props.get("FunctionName", logical)
        name = name.get("Fn::Sub", logical) if isinstance(name, dict) else name
        name = name.replace(FUNCTION_PREFIX, "")
        role = props.get("Role")
        role_id = role.get("Fn::GetAtt", [None])[0] if isinstance(role, dict) else None
        if role_id not in res:
            findings.append((name, "role", "-", str(role), "-", "role is not a role of this template"))
            continue
        statements, managed = role_statements(res, role_id, resolver)
        for arn in managed:
            findings.append((name, "managed policy", "-", arn, "-",
                             "AWS managed policy attached (its resources are `*`): use scoped statements"))
        out[name] = (role_id, statements)
    return out, findings


def role_statements(res, role_id, resolver):
    """The resolved Allow statements of a role (inline, attached AWS::IAM::Policy, template managed
    policies) and the AWS managed policy ARNs attached to it."""
    role = resolver.value(res[role_id].get("Properties", {}))
    docs = [p.get("PolicyDocument", {}) for p in role.get("Policies", [])]
    managed = []
    for arn in role.get("ManagedPolicyArns", []):
        local = next((n for n, r in res.items() if r.get("Type") == "AWS::IAM::ManagedPolicy"
                      and resolver.value({"Ref": n}) == arn), None)
        if local:
            docs.append(resolver.value(res[local]["Properties"]["PolicyDocument"]))
        else:
            managed.append(arn)
    for name, r in res.items():
        if r.get("Type") in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            roles = r.get("Properties", {}).get("Roles", [])
            if any(isinstance(x, dict) and x.get("Ref") == role_id for x in roles):
                docs.append(resolver.value(r["Properties"]["PolicyDocument"]))
    statements = [st for d in docs for st in as_list(d.get("Statement", []))
                  if isinstance(st, dict) and st.get("Effect") == "Allow"]
    return statements, managed


def leading_keys(statement):
    """The dynamodb:LeadingKeys patterns a statement is limited to, or None when it is not limited."""
    for op, values in statement.get("Condition", {}).items():
        if op.startswith("ForAllValues:String") and "dynamodb:LeadingKeys" in values:
            return as_list(values["dynamodb:LeadingKeys"])
    return None


def iam_match(pattern, value):
    """IAM's wildcard match (`*` any run, `?` one character); actions are case-insensitive."""
    return fnmatch.fnmatchcase(value, pattern)


def key_match(pattern, prefix):
    # A prefix ends at the first '#': it stands for every key that starts with it.
    sample = prefix + "x" if prefix.endswith("#") else prefix
    return iam_match(pattern, sample)


def grants(statement, action, arn, prefix):
    """True when `statement` allows `action` on `arn` for an item whose leading key starts with `prefix`."""
    if not any(iam_match(a.lower(), action.lower()) for a in as_list(statement.get("Action", []))):
        return False
    if not any(iam_match(r, arn) for r in as_list(statement.get("Resource", []))):
        return False
    conditions = statement.get("Condition", {})
    if any(leading_keys({"Condition": {op: conditions[op]}}) is None for op in conditions):
        return False  # a condition this check cannot evaluate grants nothing it can prove
    keys = leading_keys(statement)
    if keys is None:
        return True
    return prefix is not None and any(key_match(k, prefix) for k in keys)


# ---- what each function did ---------------------------------------------------------------------------------

def load_calls(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def needs(records, cfn, resolver):
    """{(function, action, arn, prefix): example operation} from the records, and findings for resources the
    template does not define."""
    res = cfn["Resources"]
    tables = [n for n, r in res.items() if r.get("Type") == "AWS::DynamoDB::Table"]
    queues = {n: resolver.physical(n) for n, r in res.items() if r.get("Type") == "AWS::SQS::Queue"}
    out, findings = {}, []
    for rec in records:
        fn, service, operation = rec["function"], rec["service"], rec["operation"]
        for access in rec.get("accesses") or [{"operation": operation}]:
            action, arn, prefix = resolve_access(service, access, tables, queues, resolver)
            if arn is None:
                findings.append((fn, "unknown resource", action, json.dumps(access), "-",
                                 "the call names a resource the template does not define"))
                continue
            out.setdefault((fn, action, arn, prefix), operation)
    return out, findings


def resolve_access(service, access, tables, queues, resolver):
    """The IAM action, resource ARN and leading-key prefix of one recorded access."""
    op = access.get("operation")
    if service in ("dynamodb", "dynamodbstreams"):
        if len(tables) != 1:
            return f"dynamodb:{op}", None, None
        table_arn = resolver.arn(tables[0])
        if service == "dynamodbstreams":
            return f"dynamodb:{op}", resolver.get_att([tables[0], "StreamArn"]), None
        arn = table_arn + (f"/index/{access['index']}" if access.get("index") else "")
        return f"dynamodb:{op}", arn, access.get("prefix")
    if service == "sqs":
        name = access.get("queue_name") or (access.get("queue") or "").rstrip("/").rsplit("/", 1)[-1]
        logical = queue_of(name, queues, resolver.params.get("Stage"))
        arn = resolver.arn(logical) if logical else None
        return f"sqs:{SQS_ACTIONS.get(op, op)}", arn, None
    if service == "secretsmanager":
        return f"secretsmanager:{op}", access.get("secret"), None
    if service == "eventbridge":
        # IAM's prefix is `events`; a partner event source's ARN has no account.
        return f"events:{op}", f"arn:{PARTITION}:events:{REGION}::event-source/{access.get('event_source')}", None
    return f"{service}:{op}", "*", None


def queue_of(local_name, queues, stage):
    """The template's queue a local queue stands for: local queues are named `<prefix><suffix>` where the
    template's is `payments-<stage><suffix>` (local_testkit::queues); the longest suffix wins."""
    best = None
    for logical, physical in queues.items():
        suffix = physical.split(f"payments-{stage}", 1)[-1]
        if suffix and local_name.endswith(suffix) and (best is None or len(suffix) > best[1]):
            best = (logical, len(suffix))
    return best[0] if best else None


# ---- the comparison -----------------------------------------------------------------------------------------

def load_waivers(path):
    data = yaml.safe_load(Path(path).read_text()) or {}
    waivers = data.get("waivers", [])
    for w in waivers:
        if not all(w.get(k) for k in ("function", "reason")) or not (w.get("action") or w.get("leading_key")):
            raise SystemExit(f"{path}: every waiver needs function, action or leading_key, and reason: {w}")
    return waivers


def waived(waivers, function, action, sid=None):
    """The waiver of `action` for `function` (optionally only in the statement `sid`), if any."""
    return next((w for w in waivers if w.get("action") and iam_match(w["function"], function)
                 and iam_match(w["action"].lower(), action.lower())
                 and (not w.get("sid") or w["sid"] == sid)), None)


def key_waived(waivers, function, key, sid):
    """The waiver of the LeadingKeys pattern `key` in `function`'s statement `sid`, if any."""
    return next((w for w in waivers if w.get("leading_key") == key and iam_match(w["function"], function)
                 and (not w.get("sid") or w["sid"] == sid)), None)


def compare(cfn, records, waivers, e2e=()):
    """Findings: (function, kind, action, resource, leading key, detail). Every call of `records` (the
    integration tests') and of `e2e` (the end-to-end runs') must be granted; only `records` prove a grant used."""
    resolver = Resolver(cfn)
    roles, findings = functions(cfn, resolver)
    needed, unknown = needs(records, cfn, resolver)
    needed_e2e, unknown_e2e = needs(e2e, cfn, resolver)
    findings += unknown + [f for f in unknown_e2e if f not in unknown]
    used = set()  # (function, statement index, action pattern) and (function, statement index, key pattern)
    calls = [(k, op, True) for k, op in needed.items()]
    calls += [(k, f"{op} (end to end)", False) for k, op in needed_e2e.items() if k not in needed]
    for (fn, action, arn, prefix), operation, proof in sorted(calls, key=lambda c: tuple(map(str, c[0]))):
        if fn not in roles:
            findings.append((fn, "no such function", action, arn, prefix or "-", "calls recorded for a function "
                             "the template does not define"))
            continue
        matching = [i for i, st in enumerate(roles[fn][1]) if grants(st, action, arn, prefix)]
        if not matching:
            findings.append((fn, "not granted", action, arn, prefix or "-", f"recorded {operation}"))
        for i in matching if proof else ():
            st = roles[fn][1][i]
            used.update((fn, i, a.lower()) for a in as_list(st["Action"]) if iam_match(a.lower(), action.lower()))
            used.update((fn, i, "key:" + k) for k in (leading_keys(st) or []) if key_match(k, prefix or ""))
    findings += unused(roles, used, waivers)
    return findings


def unused(roles, used, waivers):
    findings, waivers_used = [], set()
    for fn, (role, statements) in sorted(roles.items()):
        for i, st in enumerate(statements):
            resources = as_list(st.get("Resource", []))
            for action in as_list(st.get("Action", [])):
                w = waived(waivers, fn, action, st.get("Sid"))
                if w:
                    waivers_used.add(id(w))
                if "*" in resources and not w:
                    findings.append((fn, "`*` resource", action, "*", "-", f"{role}: not waived with a reason"))
                elif (fn, i, action.lower()) not in used and not w:
                    findings.append((fn, "unused grant", action, ", ".join(map(str, resources)), "-",
                                     f"{role} {st.get('Sid', '')}: no integration test's call uses it, and no waiver"))
            for key in leading_keys(st) or []:
                actions_waived = all(waived(waivers, fn, a, st.get("Sid")) for a in as_list(st.get("Action", [])))
                w = key_waived(waivers, fn, key, st.get("Sid"))
                if w:
                    waivers_used.add(id(w))
                if (fn, i, "key:" + key) not in used and not actions_waived and not w:
                    findings.append((fn, "unused key", st.get("Sid", "(statement)"), ", ".join(resources), key,
                                     f"{role} {st.get('Sid', '')}: no integration test's call touches it"))
    for w in waivers:
        if id(w) not in waivers_used:
            findings.append((w["function"], "stale waiver", w.get("action") or w.get("leading_key"), "-", "-",
                             "waives nothing this function is granted"))
    return findings


def print_table(findings):
    header = ("function", "finding", "action", "resource", "leading key", "detail")
    rows = [header] + [tuple(str(c) for c in f) for f in findings]
    widths = [min(max(len(r[i]) for r in rows), 70) for i in range(len(header))]
    for n, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


# ---- self-test ----------------------------------------------------------------------------------------------

def self_test(doc, records, waivers, e2e=()):
    """A grant the calls need removed, a grant they do not need added, an AWS managed policy attached, and
    the two files' roles (an end-to-end call must be granted but proves no grant used): each must be caught."""
    cfn = expand(doc)
    base = compare(cfn, records, waivers, e2e)
    needed_prefixed = [(r["function"], a) for r in records for a in r.get("accesses", [])
                       if r["service"] == "dynamodb" and a.get("prefix")]
    if not needed_prefixed:
        return ["self-test: the records hold no DynamoDB item call to take a grant from"]
    fn, access = needed_prefixed[0]
    action = "dynamodb:" + access["operation"]
    role_id = functions(cfn, Resolver(cfn))[0][fn][0]
    failed = []

    def new_findings(template, tests=records, more=e2e):
        return [f for f in compare(template, tests, waivers, more) if f not in base]

    removed = copy.deepcopy(cfn)
    for policy in removed["Resources"][role_id]["Properties"].get("Policies", []):
        for st in as_list(policy["PolicyDocument"]["Statement"]):
            acts = as_list(st.get("Action", []))
            if action in acts:
                st["Action"] = [a for a in acts if a != action] or ["dynamodb:DescribeLimits"]
    if not any(f[1] == "not granted" and f[0] == fn and f[2] == action for f in new_findings(removed)):
        failed.append(f"self-test: removing {action} from {fn}'s role was not caught")
    # A Scan on PAYMENT# items: granted by no role, so the grant added below is the only one that allows it.
    scan = {"function": fn, "service": "dynamodb", "operation": "Scan",
            "accesses": [{"operation": "Scan", "prefix": "PAYMENT#", "table": access.get("table")}]}
    if not any(f[1] == "not granted" and f[0] == fn and f[2] == "dynamodb:Scan"
               for f in new_findings(cfn, more=list(e2e) + [scan])):
        failed.append(f"self-test: an end-to-end call {fn}'s role does not grant was not caught")
    added = with_unused_scan(cfn, role_id)
    if not unused_scan(new_findings(added), fn):
        failed.append(f"self-test: an unused dynamodb:Scan on {fn}'s role was not caught")
    if not unused_scan(new_findings(added, more=list(e2e) + [scan]), fn):
        failed.append(f"self-test: a dynamodb:Scan on {fn}'s role used only end to end was taken as used")
    if unused_scan(new_findings(added, tests=list(records) + [scan]), fn):
        failed.append(f"self-test: a dynamodb:Scan on {fn}'s role used by an integration test was reported")
    managed = copy.deepcopy(cfn)
    managed["Resources"][role_id]["Properties"].setdefault("ManagedPolicyArns", []).append(
        "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole")
    if not any(f[1] == "managed policy" for f in compare(managed, records, waivers, e2e)):
        failed.append("self-test: an attached AWS managed policy was not caught")
    return failed


def with_unused_scan(cfn, role_id):
    """A copy of `cfn` whose role `role_id` may also Scan PAYMENT# items."""
    added = copy.deepcopy(cfn)
    policies = added["Resources"][role_id]["Properties"].setdefault("Policies", [])
    policies.append({"PolicyName": "SelfTestUnused", "PolicyDocument": {"Version": "2012-10-17", "Statement": [
        {"Sid": "SelfTestUnused", "Effect": "Allow", "Action": "dynamodb:Scan",
         "Resource": {"Fn::GetAtt": ["PaymentsTable", "Arn"]},
         "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["PAYMENT#*"]}}}]}})
    return added


def unused_scan(findings, fn):
    return any(f[1] == "unused grant" and f[0] == fn and f[2] == "dynamodb:Scan" for f in findings)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tests", required=True, help="the integration tests' calls (AWS_CALL_RECORD's JSON "
                        "lines): each must be granted, and they prove the grants used")
    parser.add_argument("--e2e", help="the end-to-end runs' calls: each must be granted; they prove nothing used")
    parser.add_argument("--waivers", default=str(WAIVERS))
    parser.add_argument("--template", default=str(check_template.TEMPLATE))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args(argv[1:])
    doc = check_template.load(Path(args.template))
    records, waivers = load_calls(args.tests), load_waivers(args.waivers)
    e2e = load_calls(args.e2e) if args.e2e else []
    if not records:
        print(f"permissions: {args.tests} holds no recorded call (was AWS_CALL_RECORD set?)")
        return 1
    if args.self_test:
        problems = self_test(doc, records, waivers, e2e)
        for p in problems:
            print(p)
        if problems:
            return 1
        print("permission check self-test: a removed grant, an unused one, an end-to-end call not granted and "
              "a grant used only end to end are caught")
    findings = compare(expand(doc), records, waivers, e2e)
    functions_seen = sorted({r["function"] for r in records + e2e})
    counts = f"{len(records)} integration tests' and {len(e2e)} end-to-end recorded calls"
    if findings:
        print(f"permissions: {len(findings)} finding(s) comparing {counts} of "
              f"{', '.join(functions_seen)} with their roles in the SAM-expanded template:\n")
        print_table(findings)
        return 1
    print(f"permissions: every one of {counts} ({', '.join(functions_seen)}) is granted, every grant is used by "
          "an integration test or waived")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
