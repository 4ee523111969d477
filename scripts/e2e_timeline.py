"""`paymentsctl timeline` on a checkout of the demo, checked against the API's event log (scripts/test runs it
after the checkout-saga demo; API=http://127.0.0.1:PORT, TABLE_NAME and the SDK endpoint variables set).

It picks a compensated checkout whose money was taken (refunded), runs `paymentsctl --json timeline <order>`
and checks what the issue's "How it is checked" asks: the payment lines are exactly
`GET /payments/{id}/events` (version, type, status, path, correlation id, PSP event id), the refund is among
them, the saga's compensations ran in the reverse order of its steps (payment before stock), the order
projection's cursor is at the payment's last version, and no gap is reported. With the intake's log file
(INTAKE_LOG, default .local/logs/$TABLE_NAME/WebhookIntakeFunction.log, as the local stack writes it) each
webhook transition has its delivery line (same correlation id). Then it quarantines a signed but unparseable webhook naming the payment, checks the
timeline shows it as parked, and that `parked replay --dry-run` says what it would do and writes nothing
(the whole table is compared before and after).
"""

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
import urllib.request

import boto3

import sigv4

API = os.environ["API"]
TABLE = os.environ["TABLE_NAME"]
CTL = sys.argv[1]


def fail(message):
    print(f"timeline check FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def compensated_order():
    table = boto3.resource(
        "dynamodb",
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"),
    ).Table(TABLE)
    sagas, start = [], {}
    while True:
        page = table.scan(
            FilterExpression="entity = :s AND #st = :c",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={":s": "saga", ":c": "compensated"},
            **start,
        )
        sagas += [s for s in page["Items"] if s.get("payment_id")]
        if "LastEvaluatedKey" not in page:
            break
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
    # A Stripe checkout's (the checkout demo mixes both PSPs): the quarantine check below signs a Stripe webhook.
    stripe = (s for s in sagas if s.get("checkout", {}).get("psp", "stripe") == "stripe")
    refunded = sorted((s for s in stripe if s.get("captured")), key=lambda s: s["order_id"])
    if not refunded:
        fail("the demo left no compensated Stripe checkout whose money was taken (and refunded)")
    return refunded[0]


def table_items():
    table = boto3.resource(
        "dynamodb",
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"),
    ).Table(TABLE)
    items, start = [], {}
    while True:
        page = table.scan(ConsistentRead=True, **start)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return sorted(json.dumps(i, sort_keys=True, default=str) for i in items)
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def ctl(*args):
    # Exit 3 is paymentsctl's "done, with findings" (a gap or an anomaly): the checks below read the findings.
    out = subprocess.run([CTL, "--json", *args], capture_output=True, text=True)
    if out.returncode not in (0, 3):
        fail(f"paymentsctl {' '.join(args)} exited {out.returncode}: {out.stderr}")
    # One document: where it pointed, and the command's result.
    document = json.loads(out.stdout)
    if document["target"]["table"] != TABLE:
        fail(f"paymentsctl pointed at {document['target']} instead of TABLE_NAME {TABLE}")
    return document["result"]


def timeline(order, *extra):
    return ctl("timeline", order, *extra)


def quarantine(payment):
    """A signed charge.refunded naming `payment` whose amount is not a number: the intake parks it."""
    body = json.dumps({
        "id": f"evt_e2e_quarantine_{int(time.time() * 1000)}", "type": "charge.refunded", "created": int(time.time()),
        "livemode": False,
        "data": {"object": {"id": "ch_e2e", "amount": "not a number", "currency": "eur", "amount_refunded": 1,
                            "captured": True, "metadata": {"payment_id": payment}}},
    }).encode()
    signed_at = int(time.time())
    mac = hmac.new(os.environ["DEV_STRIPE_SECRET"].encode(), f"{signed_at}.".encode() + body, hashlib.sha256)
    request = urllib.request.Request(f"{API}/webhooks/stripe", data=body, method="POST", headers={
        "Stripe-Signature": f"t={signed_at},v1={mac.hexdigest()}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as r:
        answer = json.load(r)
    if answer.get("result") != "quarantined":
        fail(f"the unparseable webhook was not quarantined: {answer}")
    parked = [p for p in ctl("parked", "list", "--kind", "quarantined") if payment in p["body"]]
    if not parked:
        fail(f"no quarantined webhook names {payment}")
    return parked[-1]


saga = compensated_order()
order, payment = saga["order_id"], saga["payment_id"]
events_url = f"{API}/payments/{payment}/events"
with urllib.request.urlopen(urllib.request.Request(events_url, headers=sigv4.sign("GET", events_url))) as r:
    log = json.load(r)["events"]

# The consumer applies asynchronously: give it a few seconds to reach the last version.
for _ in range(20):
    t = timeline(order)
    if t["cursors"] and t["cursors"][0]["applied_version"] == t["payment"]["version"]:
        break
    time.sleep(0.5)
else:
    fail(f"order-projection's cursor {t['cursors']} is not at v{t['payment']['version']}")

lines = [e for e in t["entries"] if e["source"] == "payment"]
want = [(e["version"], e["type"], e["path"], e["correlation_id"], e.get("psp_event_id")) for e in log]
got = [(e["version"], e["what"], e["path"], e["correlation_id"], e.get("psp_event_id")) for e in lines]
if got != want:
    fail(f"payment lines differ from the event log:\n  timeline {got}\n  API      {want}")
for e, line in zip(log, lines):
    if not line["status"].endswith(e["status"]):
        fail(f"v{e['version']}: timeline says {line['status']}, the API {e['status']}")

if "PaymentRefunded" not in [line["what"] for line in lines] or t["payment"]["status"] != "refunded":
    fail(f"the refund is not in the timeline: {[line['what'] for line in lines]}, {t['payment']['status']}")

# Compensations undo the steps in reverse order: the stock was reserved before the payment was requested, so
# the payment is compensated (refund) before the stock is released.
RESOURCE = {"StockReserved": "stock", "PaymentRequested": "payment",
            "PaymentRefunded": "payment", "StepCompensated": "payment", "StockReleased": "stock"}
saga_lines = [e for e in t["entries"] if e["source"] == "saga" and e["what"] in RESOURCE]
steps = [RESOURCE[e["what"]] for e in saga_lines if not e["compensation"]]
compensations = [e["what"] for e in saga_lines if e["compensation"]]
if [RESOURCE[c] for c in compensations] != steps[::-1] or "PaymentRefunded" not in compensations:
    fail(f"compensations {compensations} are not the steps {steps} in reverse order with the refund")
gaps = [f["message"] for f in t["findings"] if f["level"] == "gap"]
if gaps:
    fail(f"gaps reported: {gaps}")
print(
    f"timeline of {order} ({payment}, {t['payment']['status']}): {len(lines)} payment lines match the event log "
    f"(refund included), compensations {compensations} reverse the steps {steps}, cursor at v{t['payment']['version']}"
)

# The intake's log: every webhook transition has its delivery line (deliveries that changed nothing have one too).
local_log = os.environ.get("INTAKE_LOG", f".local/logs/{TABLE}/WebhookIntakeFunction.log")
if os.path.exists(local_log):
    deliveries = timeline(order, "--log", local_log)["deliveries"]
    applied = {d["correlation_id"] for d in deliveries if (d["result"] or "").startswith("Applied")}
    webhook = [e for e in log if e["path"] == "webhook"]
    missing = [e["version"] for e in webhook if e["correlation_id"] not in applied]
    if missing:
        fail(f"webhook transitions v{missing} have no delivery line in {local_log}: {deliveries}")
    print(f"local log: {len(deliveries)} delivery line(s) for {payment}, one per webhook transition at least")
else:
    print(f"local log {local_log} not found: delivery lines not checked")

# A quarantined webhook: in the timeline as parked, and a dry-run replay says what it would do, writes nothing.
item = quarantine(payment)
parked_lines = [e for e in timeline(order)["entries"] if e["source"] == "parked"]
if item["event_key"] not in [e["psp_event_id"] for e in parked_lines]:
    fail(f"the quarantined webhook {item['key']} is not in the timeline: {parked_lines}")
# Only the items a replay could touch: the payment's (item, events, lease) and the parked webhook's. The rest
# of the table is not compared: the stack's sweeper and recovery keep working on other checkouts meanwhile.
def replay_items():
    return [i for i in table_items() if payment in i or item["key"] in i]


before = replay_items()
report = ctl("parked", "replay", item["key"], "--kind", "quarantined", "--dry-run")
after = replay_items()
if before != after:
    fail(f"parked replay --dry-run wrote to the table: {len(before)} items of the payment and the parked "
         f"webhook before, {len(after)} after")
if not report["dry_run"] or report["wrote"] or not report["result"] or not report["detail"]:
    fail(f"the dry run does not say what it would do: {report}")
print(f"parked replay --dry-run {item['key']}: {report['result']} ({report['detail']}); the table is unchanged")
