"""SigV4 for the local world's AWS_IAM routes (payments, checkouts, inventory): the end-to-end scripts sign as
the checkout orchestrator signs in AWS (service execute-api), with botocore's signer and this process's
credentials (scripts/lib.sh's local_env sets them). The webhook route's auth is NONE: the PSP signs its body."""
import os

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def iam_route(path):
    """Whether the template's HTTP API puts `path` behind AWS_IAM (every route but the webhooks')."""
    return not path.startswith("/webhooks/")


def sign(method, url, body=b"", headers=None):
    """`headers` with the ones that sign a request of `method` to `url` with `body` (Authorization,
    X-Amz-Date and, with a session, X-Amz-Security-Token)."""
    credentials = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                              os.environ.get("AWS_SESSION_TOKEN"))
    request = AWSRequest(method=method, url=url, data=body or b"", headers=dict(headers or {}))
    SigV4Auth(credentials, "execute-api", os.environ.get("AWS_REGION", "us-east-1")).add_auth(request)
    return dict(request.headers.items())
