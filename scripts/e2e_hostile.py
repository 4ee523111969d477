"""Hostile input against the running local API (scripts/test runs it on a fresh table; API, TABLE_NAME, LOG: the
local stack's own output, LOGS: the directory of its functions' log files).

Every refusal is a 4xx with a JSON error body and writes nothing (a scan of the table before and after is
the same); a validly signed event we cannot use is quarantined (the only write: one PARKED#quarantined
item); afterwards the logs (the stack's output and every function's log file) have no panic and none of the
secrets, client secrets or retry tokens this suite sent. Covers the Stripe-Signature and Standard Webhooks header variants, Adyen's Basic auth and
per-item HMAC, bodies (empty, 1 byte,
at and over the limit, invalid UTF-8, duplicate keys, deep nesting), odd paths and methods, the field
limits and the poison pills of issue 14.
"""

import base64
import hashlib
import hmac
import http.client
import json
import os
import sys
import time
import urllib.parse
import uuid

import boto3
import stripe
from standardwebhooks.webhooks import Webhook

import sigv4

API = urllib.parse.urlparse(os.environ["API"])
TABLE = os.environ["TABLE_NAME"]
LOG = os.environ["LOG"]
LOGS = os.environ["LOGS"]
STRIPE_SECRET = os.environ["DEV_STRIPE_SECRET"]
STANDARD_SECRET = os.environ["DEV_STANDARD_SECRET"]
ADYEN_KEY = os.environ["DEV_ADYEN_HMAC_KEY"]
ADYEN_AUTH = os.environ["DEV_ADYEN_USER"] + ":" + os.environ["DEV_ADYEN_PASSWORD"]
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
API_BODY_LIMIT = 16 * 1024
WEBHOOK_BODY_LIMIT = 256 * 1024
RUN = uuid.uuid4().hex[:8]
# Values that must never reach a log line.
SECRETS = [STRIPE_SECRET, STANDARD_SECRET, ADYEN_KEY, os.environ["DEV_ADYEN_PASSWORD"]]
dynamodb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL_DYNAMODB"],
                        region_name=os.environ.get("AWS_REGION", "us-east-1"))
checks = {"passed": 0}


def fail(name, detail):
    print(f"FAIL {name} {detail}")
    sys.exit(1)


def check(name, condition, detail=""):
    if not condition:
        fail(name, detail)
    checks["passed"] += 1


def raw(method, path, body=None, headers=None, with_headers=False):
    """One request as sent (no client-side normalisation of the path); (status, parsed JSON or None), and the
    answer's headers too `with_headers`."""
    conn = http.client.HTTPConnection(API.hostname, API.port, timeout=15)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
        if sigv4.iam_route(path) and not any(k.lower() == "authorization" for k in (headers or {})):
            for k, v in sigv4.sign(method, f"http://{API.netloc}{path}", data).items():
                conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        resp = conn.getresponse()
        payload = resp.read()
        try:
            answer = json.loads(payload) if payload else None
        except ValueError:
            answer = None
        return (resp.status, answer, resp.headers) if with_headers else (resp.status, answer)
    finally:
        conn.close()


def refused(name, status, answer, expected=None):
    """A refusal: the expected 4xx (any 4xx if None) with {"error", "message"}."""
    ok = 400 <= status < 500 and (expected is None or status == expected)
    check(f"{name} -> {expected or '4xx'}", ok, (status, answer))
    check(f"{name}: JSON error", isinstance(answer, dict) and "error" in answer and "message" in answer, answer)


def scan():
    items, start = [], None
    while True:
        kwargs = {"TableName": TABLE, "ConsistentRead": True}
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = dynamodb.scan(**kwargs)
        items.extend(page["Items"])
        start = page.get("LastEvaluatedKey")
        if not start:
            return {f'{i["pk"]["S"]}|{i["sk"]["S"]}': json.dumps(i, sort_keys=True) for i in items}


def settled(quiet=2.0):
    """The table once the outbox and projections are done with what was accepted: unchanged for `quiet` s."""
    last, since, deadline = scan(), time.monotonic(), time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = scan()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    fail("table settles", "items keep changing")


def diff(before, after):
    """The keys that changed, but the catch-up's cursor: the local stack runs the catch-up every 5 s, and each
    run moves its cursor, whatever this suite sends."""
    return sorted(k for k in set(before) | set(after)
                  if before.get(k) != after.get(k) and not k.startswith("CURSOR#"))


# ---- setup: payments that are already terminal (nothing in the background touches them) -----------------
def terminal_payment(provider="stripe"):
    """A captured payment of `provider` (only its endpoint's webhooks change it), bound to a reference of its."""
    status, body = raw("POST", "/payments", {"order_id": f"order-hostile-{RUN}", "amount_minor": 1000,
                                             "currency": "EUR", "provider": provider},
                       {"Idempotency-Key": uuid.uuid4().hex})
    check("setup: create", status == 201, (status, body))
    pid = body["payment_id"]
    reference = f"pi_{pid}" if provider == "stripe" else f"psp_{pid}"
    status, body = raw("POST", f"/payments/{pid}/sync-result", {"outcome": "succeeded", "psp_reference": reference})
    check("setup: captured", status == 200 and body["status"] == "captured", (status, body))
    return pid


pid = terminal_payment()
pid_standard = terminal_payment("standard")


def stripe_body(kind="payment_intent.succeeded", obj=None, **top):
    event = {"id": "evt_h_" + uuid.uuid4().hex[:12], "object": "event", "type": kind, "created": int(time.time()),
             "livemode": False, "data": {"object": obj or {
                 "id": f"pi_{pid}", "object": "payment_intent", "amount": 1000, "currency": "eur",
                 "metadata": {"payment_id": pid}}}}
    event.update(top)
    return json.dumps(event)


def stripe_sig(payload, t=None, secret=STRIPE_SECRET):
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), f"{t}.{payload}".encode(), hashlib.sha256).hexdigest()
    return t, mac


def stripe_post(payload, header):
    headers = {"Content-Type": "application/json"}
    if header is not None:
        headers["Stripe-Signature"] = header
    return raw("POST", "/webhooks/stripe", payload.encode() if isinstance(payload, str) else payload, headers)


def standard_headers(body, msg_id=None, t=None, secret=STANDARD_SECRET):
    msg_id = msg_id or "msg_" + uuid.uuid4().hex
    t = int(time.time()) if t is None else t
    key = base64.b64decode(secret.removeprefix("whsec_"))
    sig = base64.b64encode(hmac.new(key, f"{msg_id}.{t}.{body}".encode(), hashlib.sha256).digest()).decode()
    return {"webhook-id": msg_id, "webhook-timestamp": str(t), "webhook-signature": f"v1,{sig}"}


def standard_body(**data):
    base = {"payment_id": pid_standard, "amount_minor": 1000, "currency": "EUR"}
    base.update(data)
    return json.dumps({"type": "payment.succeeded", "created": int(time.time()), "data": base})


before = settled()
started = time.monotonic()

# ---- the API's IAM auth: an unsigned call never reaches the function -------------------------------------
for method, path in [("POST", "/payments"), ("GET", f"/payments/{pid_standard}"), ("POST", "/checkouts")]:
    status, answer = raw(method, path, {"order_id": "o-unsigned", "amount_minor": 1000, "currency": "EUR"},
                         {"Authorization": "none"})
    check(f"unsigned {method} {path} -> 403 as API Gateway answers", (status, answer) == (403, {"message": "Forbidden"}),
          (status, answer))

# ---- Stripe-Signature variants: all 401 ------------------------------------------------------------------
payload = stripe_body()
t, mac = stripe_sig(payload)
# The tolerance is 300 s; "outside" is 330 s so that a slow loop (the headers are signed before the first
# request is sent) cannot bring a timestamp back inside the window. The exact edge is the unit tests' job.
OUTSIDE = 330
now = int(time.time())
for name, header in [
    ("stripe: no header", None),
    ("stripe: empty header", ""),
    ("stripe: t only", f"t={t}"),
    ("stripe: v1 only", f"v1={mac}"),
    ("stripe: duplicated t", f"t={t},t={t},v1={mac}"),
    ("stripe: duplicated t, second differs", f"t={t},v1={mac},t={t + 1}"),
    ("stripe: junk entries only", "a=b,,=,=x,t,v1"),
    ("stripe: junk around a wrong mac", f"x=1,t={t},,v1={'0' * 64},foo"),
    ("stripe: v0 scheme only", f"t={t},v0={mac}"),
    ("stripe: mac not hex", f"t={t},v1={'zz' * 32}"),
    ("stripe: huge header", f"t={t}," + ",".join(f"v1={'ab' * 32}" for _ in range(120))),
    ("stripe: 8 KB timestamp", "t=" + "9" * 8000 + f",v1={mac}"),
    ("stripe: t not a number", f"t=abc,v1={mac}"),
    ("stripe: t = i64::MAX", "t=%d,v1=%s" % stripe_sig(payload, I64_MAX)),
    ("stripe: t = i64::MIN", "t=%d,v1=%s" % stripe_sig(payload, I64_MIN)),
    ("stripe: t = i64::MAX + 1", "t=%d,v1=%s" % stripe_sig(payload, I64_MAX + 1)),
    ("stripe: t = -1", "t=%d,v1=%s" % stripe_sig(payload, -1)),
    ("stripe: t 330 s old", "t=%d,v1=%s" % stripe_sig(payload, now - OUTSIDE)),
    ("stripe: t 330 s ahead", "t=%d,v1=%s" % stripe_sig(payload, now + OUTSIDE)),
    ("stripe: wrong secret", "t=%d,v1=%s" % stripe_sig(payload, secret="whsec_wrong")),
]:
    status, answer = stripe_post(payload, header)
    refused(name, status, answer, 401)

# ---- Standard Webhooks variants: all 401 -----------------------------------------------------------------
body = standard_body()
good = standard_headers(body)
now = int(time.time())
for name, headers in [
    ("standard: no headers", {}),
    ("standard: no webhook-id", {k: v for k, v in good.items() if k != "webhook-id"}),
    ("standard: no timestamp", {k: v for k, v in good.items() if k != "webhook-timestamp"}),
    ("standard: no signature", {k: v for k, v in good.items() if k != "webhook-signature"}),
    ("standard: junk signature", {**good, "webhook-signature": "v1 v1, ,,x v2,abc"}),
    ("standard: unknown version only", {**good, "webhook-signature": good["webhook-signature"].replace("v1,", "v2,")}),
    ("standard: huge signature list", {**good, "webhook-signature": " ".join(["v1,AAAA"] * 900)}),
    ("standard: timestamp not a number", {**good, "webhook-timestamp": "1e9"}),
    ("standard: timestamp i64::MAX", standard_headers(body, t=I64_MAX)),
    ("standard: timestamp i64::MIN", standard_headers(body, t=I64_MIN)),
    ("standard: timestamp over i64", {**good, "webhook-timestamp": str(I64_MAX + 1)}),
    ("standard: 330 s old", standard_headers(body, t=now - OUTSIDE)),
    ("standard: 330 s ahead", standard_headers(body, t=now + OUTSIDE)),
    ("standard: wrong secret", standard_headers(body, secret="whsec_" + base64.b64encode(b"wrong").decode())),
]:
    status, answer = raw("POST", "/webhooks/standard", body.encode(), headers)
    refused(name, status, answer, 401)
# Validly signed, but the event does not say when it was created (the signing time is the attempt's): 400.
for name, created in [("standard: signed, no created", None), ("standard: created an hour after signing", now + 3600)]:
    event = json.loads(standard_body())
    event.pop("created")
    if created is not None:
        event["created"] = created
    body = json.dumps(event)
    status, answer = raw("POST", "/webhooks/standard", body.encode(), standard_headers(body))
    refused(name, status, answer, 400)

# Adyen: Basic auth and every item's HMAC before anything is written (a 401 for the whole batch), bodies that
# are not notifications (400), a body over the limit (413).
def adyen_item(**fields):
    item = {"pspReference": "7914073381342284", "merchantAccountCode": "LocalMerchant", "merchantReference": pid,
            "amount": {"currency": "EUR", "value": 1000}, "eventCode": "AUTHORISATION", "success": "true"}
    item.update(fields)
    signed = [str(item.get(k, "")) for k in ("pspReference", "originalReference", "merchantAccountCode",
                                             "merchantReference")]
    signed += [str(item["amount"]["value"]), item["amount"]["currency"], item["eventCode"], item["success"]]
    mac = hmac.new(bytes.fromhex(ADYEN_KEY), ":".join(signed).encode(), hashlib.sha256).digest()
    item["additionalData"] = {"hmacSignature": base64.b64encode(mac).decode()}
    return item


def adyen_body(items, live="false"):
    return json.dumps({"live": live, "notificationItems": [{"NotificationRequestItem": i} for i in items]})


def adyen_headers(auth=ADYEN_AUTH):
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    return headers


forged = adyen_item()
forged["amount"]["value"] = 1
unsigned = adyen_item()
unsigned.pop("additionalData")
other_key = adyen_item()
other_key["additionalData"]["hmacSignature"] = base64.b64encode(b"\0" * 32).decode()
for name, body, headers, expected in [
    ("adyen: no Basic auth", adyen_body([adyen_item()]), adyen_headers(None), 401),
    ("adyen: a wrong password", adyen_body([adyen_item()]), adyen_headers(ADYEN_AUTH + "x"), 401),
    ("adyen: Basic auth of another scheme", adyen_body([adyen_item()]), {"Authorization": "Bearer x"}, 401),
    ("adyen: a forged amount beside a good item", adyen_body([adyen_item(), forged]), adyen_headers(), 401),
    ("adyen: an item without hmacSignature", adyen_body([unsigned]), adyen_headers(), 401),
    ("adyen: a signature of another key", adyen_body([other_key]), adyen_headers(), 401),
    ("adyen: not JSON", "[accepted]", adyen_headers(), 400),
    ("adyen: no items", adyen_body([]), adyen_headers(), 400),
    ("adyen: 101 items", adyen_body([adyen_item()] * 101), adyen_headers(), 400),
    ("adyen: a float amount", adyen_body([adyen_item(amount={"currency": "EUR", "value": 10.5})]),
     adyen_headers(), 400),
    ("adyen: a reference of 300 characters", adyen_body([adyen_item(merchantReference="r" * 300)]),
     adyen_headers(), 400),
    ("adyen: a body over the limit", adyen_body([adyen_item(reason="r" * WEBHOOK_BODY_LIMIT)]), adyen_headers(), 413),
]:
    status, answer = raw("POST", "/webhooks/adyen", body.encode(), headers)
    refused(name, status, answer, expected)

# ---- bodies ------------------------------------------------------------------------------------------------
key = {"Idempotency-Key": uuid.uuid4().hex}
for name, data, expected in [
    ("payments: empty body", b"", 400),
    ("payments: 1 byte", b"{", 400),
    ("payments: invalid UTF-8", b'{"order_id":"\xff\xfe","amount_minor":1,"currency":"EUR"}', 400),
    ("payments: duplicate keys", b'{"order_id":"a","order_id":"b","amount_minor":1,"currency":"EUR"}', 400),
    ("payments: deep nesting", b'{"metadata":' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
    ("payments: at the limit (refused for its content)",
     b'{"order_id":"o","amount_minor":1,"currency":"EURO"}'.ljust(API_BODY_LIMIT, b" "), 400),
    ("payments: one byte over the limit", b"{" + b" " * API_BODY_LIMIT + b"}", 413),
    ("payments: 1 MB", b"[" * (1 << 20), 413),
]:
    status, answer = raw("POST", "/payments", data, key)
    refused(name, status, answer, expected)
for name, data, expected in [
    ("sync-result: empty", b"", 400),
    ("sync-result: not an object", b"[]", 400),
    ("sync-result: null bytes", b'{"outcome":"failed","reason":"\x00"}', 400),
    ("sync-result: over the limit", b'{"outcome":"failed","reason":"' + b"r" * API_BODY_LIMIT + b'"}', 413),
]:
    status, answer = raw("POST", f"/payments/{pid}/sync-result", data)
    refused(name, status, answer, expected)
for name, data, expected in [
    ("checkouts: empty", b"", 400),
    ("checkouts: deep nesting", b"[" * 3000, 400),
    ("checkouts: over the limit", b" " * (API_BODY_LIMIT + 1), 413),
    ("inventory: over the limit", b" " * (API_BODY_LIMIT + 1), 413),
]:
    path = "/checkouts" if name.startswith("checkouts") else f"/inventory/sku-{RUN}"
    status, answer = raw("PUT" if path.startswith("/inventory") else "POST", path, data)
    refused(name, status, answer, expected)
status, answer = raw("GET", f"/payments/{pid}", b"x" * (API_BODY_LIMIT + 1))
refused("GET with a body over the limit", status, answer, 413)
for name, data, expected in [
    ("stripe: empty body", b"", 400),
    ("stripe: 1 byte", b"{", 401),
    ("stripe: invalid UTF-8", b"\xff\xfe\xfd", 401),
    ("stripe: at the limit, unsigned", b" " * WEBHOOK_BODY_LIMIT, 401),
    ("stripe: over the limit", b" " * (WEBHOOK_BODY_LIMIT + 1), 413),
]:
    status, answer = stripe_post(data, "t=%d,v1=%s" % stripe_sig("x"))
    refused(name, status, answer, expected)

# ---- odd paths and methods ------------------------------------------------------------------------------
# A method or path no route of the template takes never reaches a function: API Gateway answers 404 with its
# own body (the local world is the template's HTTP API).
def gateway_refused(name, status, answer):
    check(f"{name} -> API Gateway's 404", (status, answer) == (404, {"message": "Not Found"}), (status, answer))


for name, method, path in [
    ("GET /payments", "GET", "/payments"),
    ("DELETE a payment", "DELETE", f"/payments/{pid}"),
    ("PUT sync-result", "PUT", f"/payments/{pid}/sync-result"),
    ("GET a webhook", "GET", "/webhooks/stripe"),
    ("PATCH checkouts", "PATCH", "/checkouts"),
    ("DELETE a stock item", "DELETE", f"/inventory/sku-{RUN}"),
    ("an unknown sub-resource", "GET", f"/payments/{pid}/secrets"),
    ("dot segments", "GET", "/../../etc/passwd"),
    ("no route", "GET", "/"),
    ("a provider path with extra segments", "POST", "/webhooks/stripe/x"),
]:
    gateway_refused(name, *raw(method, path))
# A path a route takes, with a value its function refuses: the function's own JSON error.
for name, method, path, expected in [
    ("a NUL in the id", "GET", "/payments/pay%00x", 400),
    ("an id over 64 characters", "GET", "/payments/" + "p" * 65, 400),
    ("a 6 KB path", "GET", "/payments/" + "p" * 6000, 400),
    ("an unknown provider", "POST", "/webhooks/paypal", 404),
    ("an order id over 128 characters", "GET", "/checkouts/" + "o" * 129, 400),
    ("a sku with a slash encoded", "GET", "/inventory/a%2Fb", 400),
]:
    status, answer = raw(method, path)
    refused(name, status, answer, expected)

# ---- field limits and characters (item 1) -----------------------------------------------------------------
client_secret = f"pi_{RUN}_secret_hostile{uuid.uuid4().hex}"
retry_token = f"rt_hostile_{uuid.uuid4().hex}"
SECRETS += [client_secret, retry_token]


def create(**fields):
    body = {"order_id": f"o-{RUN}", "amount_minor": 1000, "currency": "EUR", **fields}
    return raw("POST", "/payments", body, {"Idempotency-Key": uuid.uuid4().hex})


for name, fields in [
    ("order_id of 129 characters", {"order_id": "o" * 129}),
    ("order_id with U+FFFF", {"order_id": "o\uffff"}),
    ("psp_reference of 129 characters", {"psp_reference": "p" * 129}),
    ("psp_reference '..' (a URL path segment)", {"psp_reference": ".."}),
    ("a metadata value with U+FFFE", {"metadata": {"k": "v\ufffe"}}),
    ("a metadata value of 201 characters", {"metadata": {"k": "v" * 201}}),
    ("a metadata value with a control character", {"metadata": {"k": "a\u0007"}}),
    ("eleven metadata keys", {"metadata": {f"k{i}": "v" for i in range(11)}}),
    ("a 200 KB currency", {"currency": "E" * 200_000}),
]:
    status, answer = create(**fields)
    refused("create: " + name, status, answer, 413 if len(json.dumps(fields)) > API_BODY_LIMIT else 400)
status, answer = raw("POST", "/payments", {"order_id": "o", "amount_minor": 1, "currency": "EUR"},
                     {"Idempotency-Key": "k" * 129})
refused("create: Idempotency-Key of 129 characters", status, answer, 400)

for name, result in [
    ("reason with U+FFFF", {"outcome": "failed", "reason": "fraud\uffff"}),
    ("reason with U+FDD0", {"outcome": "failed", "reason": "\ufdd0"}),
    ("reason with a newline", {"outcome": "failed", "reason": "a\nb"}),
    ("reason of 201 characters", {"outcome": "failed", "reason": "r" * 201}),
    ("decline code with U+FFFF", {"outcome": "attempt_failed", "decline_code": "card\uffff"}),
    ("retry_token of 513 characters", {"outcome": "attempt_failed", "decline_code": "d", "retry_token": "t" * 513}),
    ("retry_token with a control character", {"outcome": "attempt_failed", "decline_code": "d",
                                              "retry_token": retry_token + "\u0001"}),
    ("client_secret of 513 characters", {"outcome": "requires_action", "client_secret": "s" * 513}),
    ("client_secret with U+FFFF", {"outcome": "requires_action", "client_secret": client_secret + "\uffff"}),
    ("redirect http://localhost@evil.example", {"outcome": "requires_action",
                                                 "redirect_url": "http://localhost@evil.example/3ds"}),
    ("redirect http://localhost.evil.example", {"outcome": "requires_action",
                                                 "redirect_url": "http://localhost.evil.example/3ds"}),
    ("redirect with user info", {"outcome": "requires_action", "redirect_url": "https://bank.example@evil.example/"}),
    ("redirect javascript:", {"outcome": "requires_action", "redirect_url": "javascript:alert(1)"}),
    ("redirect with a backslash", {"outcome": "requires_action", "redirect_url": "https://bank.example\\@evil/"}),
    ("redirect of 3 KB", {"outcome": "requires_action", "redirect_url": "https://bank.example/" + "a" * 3000}),
    ("psp_reference with a space", {"outcome": "succeeded", "psp_reference": "pi 1"}),
    ("psp_reference '..'", {"outcome": "succeeded", "psp_reference": ".."}),
]:
    status, answer = raw("POST", f"/payments/{pid}/sync-result", result)
    refused("sync-result: " + name, status, answer, 400)


def checkout(**fields):
    body = {"order_id": f"c-{RUN}", "sku": f"sku-{RUN}", "quantity": 1, "amount_minor": 1000, "currency": "EUR",
            "payment_method": "pm_succeeded", **fields}
    return raw("POST", "/checkouts", body)


for name, fields in [
    ("order_id of 129 characters", {"order_id": "o" * 129}),
    ("order_id with a space", {"order_id": "o 1"}),
    ("payment_method with NUL", {"payment_method": "pm_\u0000"}),
    ("payment_method of 65 characters", {"payment_method": "p" * 65}),
    ("payment_method with U+FFFF", {"payment_method": "pm_\uffff"}),
    ("sku of 65 characters", {"sku": "s" * 65}),
    ("quantity 0", {"quantity": 0}),
    ("quantity over u32", {"quantity": 2**32}),
    ("negative amount", {"amount_minor": -1}),
]:
    status, answer = checkout(**fields)
    refused("checkout: " + name, status, answer, 400)

after = settled()
check("refusals wrote nothing", diff(before, after) == [], diff(before, after)[:5])

# ---- signed events we cannot use: quarantined (one parked item each), never 500 ---------------------------
quarantined = []
for name, payload in [
    ("stripe: a cancellation reason with U+FFFF",
     stripe_body("payment_intent.canceled", {"id": f"pi_{pid}", "object": "payment_intent", "amount": 1000,
                                             "currency": "eur", "metadata": {"payment_id": pid},
                                             "cancellation_reason": "fraud\uffff"})),
    ("stripe: a decline code of 201 characters",
     stripe_body("payment_intent.payment_failed", {"id": f"pi_{pid}", "object": "payment_intent", "amount": 1000,
                                                   "currency": "eur", "metadata": {"payment_id": pid},
                                                   "last_payment_error": {"decline_code": "d" * 201}})),
    ("stripe: an account of 200 KB", stripe_body(account="a" * 200_000)),
    ("stripe: a client secret of 513 characters",
     stripe_body("payment_intent.requires_action", {"id": f"pi_{pid}", "object": "payment_intent", "amount": 1000,
                                                    "currency": "eur", "metadata": {"payment_id": pid},
                                                    "client_secret": "s" * 513})),
    ("stripe: a redirect to http://localhost@evil.example",
     stripe_body("payment_intent.requires_action", {"id": f"pi_{pid}", "object": "payment_intent", "amount": 1000,
                                                    "currency": "eur", "metadata": {"payment_id": pid},
                                                    "next_action": {"type": "redirect_to_url", "redirect_to_url": {
                                                        "url": "http://localhost@evil.example/"}}})),
]:
    status, answer = stripe_post(payload, "t=%d,v1=%s" % stripe_sig(payload))
    check(name + " -> quarantined", (status, (answer or {}).get("result")) == (200, "quarantined"), (status, answer))
    quarantined.append(name)
# Two unreadable Stripe bodies under one (unsigned) webhook-id header: each parked under its own event id.
for n in (1, 2):
    payload = stripe_body(account="a" * 200 + str(n))
    headers = {"Content-Type": "application/json", "Stripe-Signature": "t=%d,v1=%s" % stripe_sig(payload),
               "webhook-id": f"evt_same_{RUN}"}
    status, answer = raw("POST", "/webhooks/stripe", payload.encode(), headers)
    name = f"stripe: unreadable body {n} under a shared webhook-id header"
    check(name + " -> quarantined", (status, (answer or {}).get("result")) == (200, "quarantined"), (status, answer))
    quarantined.append(name)
for name, body, msg_id in [
    ("standard: a reason with U+FFFF", json.dumps({"type": "payment.failed", "created": int(time.time()), "data": {
        "payment_id": pid_standard, "amount_minor": 1000, "currency": "EUR", "reason": "fraud\uffff"}}), None),
    ("standard: an account of 129 characters", json.dumps({"type": "payment.succeeded", "created": int(time.time()),
                                                            "account": "a" * 129,
                                                            "data": {"payment_id": pid_standard,
                                                                     "amount_minor": 1000, "currency": "EUR"}}), None),
    ("standard: a webhook-id of 1100 characters", standard_body(), "m" * 1100),
    ("standard: a webhook-id of 8 KB", standard_body() + " ", "m" * 8000),
]:
    status, answer = raw("POST", "/webhooks/standard", body.encode(), standard_headers(body, msg_id=msg_id))
    check(name + " -> quarantined", (status, (answer or {}).get("result")) == (200, "quarantined"), (status, answer))
    quarantined.append(name)
# A validly signed Adyen item we cannot use: accepted (Adyen's queue goes on) and quarantined.
for name, item in [("adyen: success neither true nor false", adyen_item(success="maybe")),
                   ("adyen: a currency that is none", adyen_item(amount={"currency": "EURO", "value": 1000}))]:
    conn = http.client.HTTPConnection(API.hostname, API.port, timeout=15)
    conn.request("POST", "/webhooks/adyen", adyen_body([item]).encode(), adyen_headers())
    resp = conn.getresponse()
    text = resp.read().decode(errors="replace")
    conn.close()
    check(name + " -> [accepted], quarantined", (resp.status, text) == (200, "[accepted]"), (resp.status, text))
    quarantined.append(name)
later = settled()
changed = diff(after, later)
check("quarantines wrote only parked items", all(k.startswith("PARKED#quarantined|") for k in changed), changed)
check("one parked item per quarantined delivery", len(changed) == len(quarantined), (len(changed), changed))

# ---- poison pills: order ids whose derived ids were too long; the process keeps serving --------------------
status, answer = raw("PUT", f"/inventory/sku-{RUN}", {"available": 100})
check("poison: stock set", status == 200, (status, answer))
for n in (120, 124, 128):
    order = f"o{RUN}" + "x" * (n - 1 - len(RUN))
    status, answer = checkout(order_id=order)
    check(f"poison: a checkout with a {n}-character order id is accepted", status == 202, (status, answer))
    status, answer = raw("GET", f"/checkouts/{order}")
    check(f"poison: its saga is readable ({n})", status == 200 and answer["order_id"] == order, (status, answer))
status, answer = raw("GET", f"/payments/{pid}")
check("poison: the API still answers after them", status == 200, (status, answer))
elapsed = time.monotonic() - started

# ---- the logs --------------------------------------------------------------------------------------------
time.sleep(1)
log = ""
for path in [LOG] + sorted(os.path.join(LOGS, name) for name in os.listdir(LOGS)):
    with open(path, encoding="utf-8", errors="replace") as f:
        log += f.read()
check("no panic in the log", "panicked" not in log and "RUST_BACKTRACE" not in log,
      [line for line in log.splitlines() if "panicked" in line][:3])
for secret in SECRETS:
    check("no secret in the log", secret not in log, secret[:8] + "...")
print(f"hostile input: {checks['passed']} checks passed in {elapsed:.1f} s")
