"""End-to-end check against the running local API (scripts/test runs it; API=http://127.0.0.1:PORT).

Webhooks signed by the official Stripe, Standard Webhooks and Adyen libraries are accepted; every tampered
variant is refused with 401 and changes nothing. The seed's race (T=0..T=3) is replayed through the API: no answer
about a terminal payment carries a secret or redirect URL.
"""

import datetime
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

import base64

import stripe
from Adyen.util import generate_notification_sig, is_valid_hmac_notification
from standardwebhooks.webhooks import Webhook

import sigv4

API = os.environ["API"]
STRIPE_SECRET = os.environ["DEV_STRIPE_SECRET"]
STANDARD_SECRET = os.environ["DEV_STANDARD_SECRET"]
ADYEN_HMAC_KEY = os.environ["DEV_ADYEN_HMAC_KEY"]
ADYEN_BASIC = base64.b64encode(f'{os.environ["DEV_ADYEN_USER"]}:{os.environ["DEV_ADYEN_PASSWORD"]}'.encode()).decode()
SECRET_FIELDS = ("client_secret", "redirect_url", "retry_token")
checks = {"passed": 0}


def call(method, path, body=None, headers=None):
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    if sigv4.iam_route(path):
        headers = sigv4.sign(method, API + path, data, headers)
    req = urllib.request.Request(API + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL {name} {detail}")
        sys.exit(1)
    checks["passed"] += 1
    print(f"ok   {name}")


def create_payment(provider="stripe"):
    """A payment of `provider` (only its endpoint's webhooks change it)."""
    status, body = call("POST", "/payments", {"order_id": "order-e2e", "amount_minor": 1000, "currency": "EUR",
                                              "provider": provider}, {"Idempotency-Key": str(uuid.uuid4())})
    check("create payment", status == 201, body)
    return body["payment_id"]


def version(pid):
    return call("GET", f"/payments/{pid}")[1]["version"]


def stripe_event(event_id, kind, pid):
    return json.dumps({"id": event_id, "object": "event", "type": kind, "created": int(time.time()),
                       "livemode": False, "data": {"object": {
                           "id": f"pi_{pid}", "object": "payment_intent", "amount": 1000, "currency": "eur",
                           "metadata": {"payment_id": pid}, "client_secret": f"pi_{pid}_secret_x"}}})


def stripe_post(payload, header):
    return call("POST", "/webhooks/stripe", payload.encode(), {"Stripe-Signature": header,
                                                                "Content-Type": "application/json"})


# ---- Stripe, signed by stripe-python -------------------------------------------------------------------
pid = create_payment()
payload = stripe_event("evt_e2e_" + uuid.uuid4().hex[:8], "payment_intent.processing", pid)
good = stripe.WebhookSignature.generate_signature_header(payload, STRIPE_SECRET)
before = version(pid)
for name, body, header in [
    ("stripe: tampered body", payload.replace('"amount": 1000', '"amount": 1001'), good),
    ("stripe: tampered header", payload, good.replace("t=", "t=1", 1)),
    ("stripe: old timestamp", payload,
     stripe.WebhookSignature.generate_signature_header(payload, STRIPE_SECRET, int(time.time()) - 301)),
    ("stripe: wrong secret", payload, stripe.WebhookSignature.generate_signature_header(payload, "whsec_wrong")),
    ("stripe: no signature", payload, ""),
]:
    status, answer = stripe_post(body, header)
    check(name + " -> 401", status == 401, (status, answer))
check("stripe: refusals wrote nothing", version(pid) == before)
status, answer = stripe_post(payload, good)
check("stripe: official signature accepted", (status, answer.get("result")) == (200, "applied"), (status, answer))
check("stripe: redelivery is a duplicate", stripe_post(payload, good)[1].get("result") == "duplicate")

# ---- Standard Webhooks, signed by the standardwebhooks library ----------------------------------------------
pid2 = create_payment("standard")
wh = Webhook(STANDARD_SECRET)
msg_id = "msg_" + uuid.uuid4().hex
body = json.dumps({"type": "payment.succeeded", "created": int(time.time()),
                   "data": {"payment_id": pid2, "amount_minor": 1000, "currency": "EUR"}})
now = datetime.datetime.now(tz=datetime.timezone.utc)
headers = {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
           "webhook-signature": wh.sign(msg_id, now, body)}
before = version(pid2)
for name, b, h in [
    ("standard: tampered body", body.replace("1000", "1001"), headers),
    ("standard: tampered id", body, {**headers, "webhook-id": msg_id + "x"}),
    ("standard: tampered timestamp", body, {**headers, "webhook-timestamp": str(int(now.timestamp()) + 1)}),
    ("standard: wrong secret", body, {**headers, "webhook-signature":
                                      Webhook("whsec_" + "d3Jvbmc=").sign(msg_id, now, body)}),
    ("standard: old timestamp", body, {**headers, "webhook-timestamp": str(int(now.timestamp()) - 301),
                                       "webhook-signature": wh.sign(msg_id, now - datetime.timedelta(seconds=301), body)}),
]:
    status, answer = call("POST", "/webhooks/standard", b.encode(), h)
    check(name + " -> 401", status == 401, (status, answer))
check("standard: refusals wrote nothing", version(pid2) == before)
status, answer = call("POST", "/webhooks/standard", body.encode(), headers)
check("standard: official signature accepted", (status, answer.get("result")) == (200, "applied"), (status, answer))

# ---- Adyen, each item signed by Adyen's Python library (Adyen.util) ---------------------------------------------
def adyen_item(code, pid, psp, original=None, amount=1000, key=ADYEN_HMAC_KEY):
    item = {"pspReference": psp, "merchantAccountCode": "LocalShopECOM", "merchantReference": pid,
            "amount": {"value": amount, "currency": "EUR"}, "eventCode": code, "success": "true",
            "eventDate": "2026-12-02T12:00:00+01:00", "reason": "", "paymentMethod": "visa"}
    if original:
        item["originalReference"] = original
    item["additionalData"] = {"hmacSignature": generate_notification_sig(item, key).decode()}
    return item


def adyen_post(items, basic=ADYEN_BASIC):
    body = json.dumps({"live": "false", "notificationItems": [{"NotificationRequestItem": i} for i in items]})
    req = urllib.request.Request(API + "/webhooks/adyen", data=body.encode(), method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Basic " + basic})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


pid5 = create_payment("adyen")
psp5, capture5 = "E2E" + uuid.uuid4().hex[:13].upper(), "E2C" + uuid.uuid4().hex[:13].upper()
authorised = adyen_item("AUTHORISATION", pid5, psp5)
check("adyen: the library verifies its own item", is_valid_hmac_notification(authorised, ADYEN_HMAC_KEY))
before = version(pid5)
for name, items, basic in [
    ("adyen: tampered amount", [{**authorised, "amount": {"value": 1001, "currency": "EUR"}}], ADYEN_BASIC),
    ("adyen: tampered success", [{**authorised, "success": "false"}], ADYEN_BASIC),
    ("adyen: wrong key", [adyen_item("AUTHORISATION", pid5, psp5, key="00" * 32)], ADYEN_BASIC),
    ("adyen: one forged item of a batch", [authorised, {**adyen_item("CAPTURE", pid5, capture5, psp5),
                                                        "merchantReference": pid5 + "x"}], ADYEN_BASIC),
    ("adyen: wrong Basic auth", [authorised], base64.b64encode(b"adyen:wrong").decode()),
]:
    status, answer = adyen_post(items, basic)
    check(name + " -> 401", status == 401, (status, answer))
check("adyen: refusals wrote nothing", version(pid5) == before)
status, answer = adyen_post([authorised, adyen_item("CAPTURE", pid5, capture5, psp5)])
check("adyen: a batch signed by the library is accepted", (status, answer) == (200, "[accepted]"), (status, answer))
check("adyen: and applied item by item", call("GET", f"/payments/{pid5}")[1].get("status") == "captured")
after = version(pid5)
check("adyen: its redelivery is accepted and changes nothing",
      adyen_post([authorised]) == (200, "[accepted]") and version(pid5) == after)

# ---- The seed's rows and race, through the running API ------------------------------------------------------
pid3 = create_payment()
action = {"outcome": "requires_action", "client_secret": f"pi_{pid3}_secret_y", "redirect_url": "https://bank.example/3ds"}
status, view = call("POST", f"/payments/{pid3}/sync-result", action)
check("seed: redirect needed gives a valid redirect URL", view.get("redirect_url", "").startswith("https://"), view)
# T=1: the webhook captures. T=2: the sync path's redirect answer arrives late. T=3: nothing to follow.
payload = stripe_event("evt_e2e_" + uuid.uuid4().hex[:8], "payment_intent.succeeded", pid3)
check("seed: webhook captures", stripe_post(payload, stripe.WebhookSignature.generate_signature_header(payload, STRIPE_SECRET))[1].get("result") == "applied")
status, view = call("POST", f"/payments/{pid3}/sync-result", action)
check("seed: late redirect answer is captured without secret",
      view.get("status") == "captured" and not any(f in view for f in SECRET_FIELDS), view)
status, view = call("GET", f"/payments/{pid3}")
check("seed: captured gives a success result without secret",
      view.get("status") == "captured" and not any(f in view for f in SECRET_FIELDS), view)
pid4 = create_payment()
call("POST", f"/payments/{pid4}/sync-result", action)
status, view = call("POST", f"/payments/{pid4}/sync-result", {"outcome": "failed", "reason": "canceled"})
check("seed: failed gives a failure result without secret",
      view.get("status") == "failed" and not any(f in view for f in SECRET_FIELDS), view)

print(f"{checks['passed']} passed, 0 failed")
