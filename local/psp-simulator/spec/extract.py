"""Cuts the operations our Stripe client calls out of Stripe's OpenAPI description (stripe/openapi spec3).

Usage: extract.py SPEC3 COMMIT PATH_IN_REPO > stripe-subset.json

SPEC3 is spec3.json or spec3.yaml of stripe/openapi at COMMIT. Kept per operation: the operationId, the
parameters (name, in, required, schema) and the form request body's schema; descriptions, titles and the
responses are dropped and every $ref is resolved inline, so the subset stands alone and stays small.
"""

import json
import sys

# The operations psp::StripeClient (shared/psp/src/stripe/client.rs) calls, and the ones the simulator serves for other parts of issue 23
# (a refund's retrieve, the Events API): method, path.
OPERATIONS = [
    ("post", "/v1/payment_intents"),
    ("get", "/v1/payment_intents/{intent}"),
    ("get", "/v1/payment_intents/search"),
    ("post", "/v1/payment_intents/{intent}/cancel"),
    ("post", "/v1/payment_intents/{intent}/capture"),
    ("post", "/v1/payment_intents/{intent}/confirm"),
    ("post", "/v1/refunds"),
    ("get", "/v1/refunds"),
    ("get", "/v1/refunds/{refund}"),
    ("get", "/v1/events"),
]

DROPPED = {"description", "title", "x-expandableFields", "x-resourceId", "x-stripeResource"}


def load(path):
    with open(path, encoding="utf-8") as f:
        if path.endswith((".yaml", ".yml")):
            import yaml

            return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        return json.load(f)


def clean(node, spec, seen=()):
    """`node` without prose, its $refs resolved (a recursive $ref is cut to a bare object)."""
    if isinstance(node, list):
        return [clean(n, spec, seen) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        if ref in seen:
            return {"type": "object"}
        target = spec
        for part in ref.lstrip("#/").split("/"):
            target = target[part]
        return clean(target, spec, seen + (ref,))
    return {k: clean(v, spec, seen) for k, v in node.items() if k not in DROPPED}


def main():
    source, commit, path = sys.argv[1:4]
    spec = load(source)
    paths = {}
    for method, route in OPERATIONS:
        op = spec["paths"][route][method]
        body = op.get("requestBody", {}).get("content", {}).get("application/x-www-form-urlencoded", {})
        paths.setdefault(route, {})[method] = {
            "operationId": op["operationId"],
            "parameters": [
                {k: clean(p[k], spec) for k in ("name", "in", "required", "schema", "style", "explode") if k in p}
                for p in op.get("parameters", [])
            ],
            "requestBody": clean(body.get("schema", {"type": "object", "properties": {}}), spec),
        }
    subset = {
        "x-source": {
            "repository": "https://github.com/stripe/openapi",
            "commit": commit,
            "path": path,
            "api_version": spec["info"]["version"],
            "generated_by": "local/psp-simulator/spec/extract.py",
        },
        "paths": paths,
    }
    json.dump(subset, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
