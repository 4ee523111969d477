"""`paymentsctl timeline` on a checkout of the demo, checked against the API's event log (scripts/test runs it
after the checkout-saga demo; API=http://127.0.0.1:PORT, TABLE_NAME and the SDK endpoint variables set).

It picks a compensated checkout whose money was taken (refunded), else any compensated one, runs
`paymentsctl --json timeline <order>` and checks: the payment lines are exactly `GET /payments/{id}/events`
(version, type, status, path, correlation id, PSP event id), the saga's compensations ran payment first, the
order projection's cursor is at the payment's last version, and no gap is reported.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request

import boto3

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
    if not sagas:
        fail("the demo left no compensated checkout with a payment")
    sagas.sort(key=lambda s: (not s.get("captured"), s["order_id"]))
    return sagas[0]


def timeline(order):
    out = subprocess.run([CTL, "--json", "timeline", order], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


saga = compensated_order()
order, payment = saga["order_id"], saga["payment_id"]
with urllib.request.urlopen(f"{API}/payments/{payment}/events") as r:
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

compensations = [e["what"] for e in t["entries"] if e["source"] == "saga" and e["compensation"]]
if not compensations or compensations[-1] != "StockReleased" or len(compensations) < 2:
    fail(f"compensations not payment first, then stock: {compensations}")
gaps = [f["message"] for f in t["findings"] if f["level"] == "gap"]
if gaps:
    fail(f"gaps reported: {gaps}")
print(
    f"timeline of {order} ({payment}, {t['payment']['status']}): {len(lines)} payment lines match the event log, "
    f"compensations {compensations}, cursor at v{t['payment']['version']}"
)
