# Shared by scripts/test and scripts/run-local (sourced, not run): starting and stopping the local parts.

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Development webhook secrets, documented in README. Never use them anywhere but on 127.0.0.1.
export DEV_STRIPE_SECRET="whsec_local_dev_stripe_signing_secret"
export DEV_STANDARD_SECRET="whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA=="
# Adyen's endpoint: its HMAC key (hex, marked test) and the Basic auth it is configured with.
export DEV_ADYEN_HMAC_KEY="6C6F63616C2D6465762D616479656E2D686D61632D6B65792D30303030303030"
export DEV_ADYEN_USER="adyen"
export DEV_ADYEN_PASSWORD="local-dev-adyen-password"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to 2 minutes for 127.0.0.1:$1 ($2 names what should answer); with a process id $3, fails as soon as
# that process ends, showing the end of its log $4 (a local world that refused to start says why there).
wait_for_port() {
  local port="$1" what="$2" pid="${3:-}" log="${4:-}"
  for _ in $(seq 1 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "$what exited before it answered on 127.0.0.1:$port" >&2
      [ -f "$log" ] && tail -n 30 "$log" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "$what did not answer on 127.0.0.1:$port" >&2
  return 1
}

# The environment every local process uses: the SDK's own endpoint variables and dummy credentials.
local_env() {
  local ddb_port="$1" sqs_port="${2:-}"
  export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$ddb_port"
  export AWS_ENDPOINT_URL_DYNAMODB_STREAMS="http://127.0.0.1:$ddb_port"
  # moto plays SQS and Secrets Manager: the local stack stores its secrets there and the functions read
  # them by ARN, as in AWS.
  if [ -n "$sqs_port" ]; then
    export AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$sqs_port"
    export AWS_ENDPOINT_URL_SECRETS_MANAGER="http://127.0.0.1:$sqs_port"
  fi
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}"
  export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
  export TABLE_NAME="${TABLE_NAME:-payments-local}"
  # Built first: `${WEBHOOK_SECRETS:-{...}}` would end the expansion at the JSON's first `}` and append the
  # rest to a value already set.
  local dev_secrets
  dev_secrets="{\"stripe\":[\"$DEV_STRIPE_SECRET\"],\"standard\":[\"$DEV_STANDARD_SECRET\"],\"adyen\":[\"hmac:test:$DEV_ADYEN_HMAC_KEY\",\"basic:$DEV_ADYEN_USER:$DEV_ADYEN_PASSWORD\"]}"
  export WEBHOOK_SECRETS="${WEBHOOK_SECRETS:-$dev_secrets}"
}

# Builds the debug binary of package $1 with cargo's own progress on stderr (a first build compiles for
# minutes: a silent terminal looked hung), after a line saying what is being built.
build_bin() {
  echo "== building $1 (cargo build -p $1; the first build takes minutes)" >&2
  cargo build -p "$1"
}

# Builds and starts the PSP simulator on 127.0.0.1:$1 (webhooks to the local API on $2) in the background,
# its output to $3 (default: this terminal), with its Adyen side on ADYEN_PSP_PORT (default: a free port;
# notifications to the local API's /webhooks/adyen, signed with DEV_ADYEN_HMAC_KEY, Basic DEV_ADYEN_USER);
# sets psp_pid and exports, for the local API, PSP_BASE_URL, PSP_API_KEY (the simulated account's dev key)
# and the charge's redirect choice (PSP_REDIRECTS=never unless PSP_RETURN_URL is set: the simulator's
# methods need no redirect), and the Adyen client's ADYEN_BASE_URL, ADYEN_API_KEY, ADYEN_MERCHANT_ACCOUNT
# (the simulator's dev account) and ADYEN_RETURN_URL.
start_psp() {
  local port="$1" api_port="$2" log="${3:-/dev/stdout}"
  local adyen_port="${ADYEN_PSP_PORT:-$(free_port)}"
  build_bin psp-simulator
  local bin="${CARGO_TARGET_DIR:-$root/target}/debug/psp-simulator"
  export PSP_API_KEY="${PSP_API_KEY:-sk_test_local_simulator}"
  [ -n "${PSP_RETURN_URL:-}" ] || export PSP_REDIRECTS="${PSP_REDIRECTS:-never}"
  export ADYEN_API_KEY="${ADYEN_API_KEY:-AQE_local_adyen_simulator_key}"
  export ADYEN_MERCHANT_ACCOUNT="${ADYEN_MERCHANT_ACCOUNT:-LocalShopECOM}"
  SIMULATOR_PORT="$port" API="http://127.0.0.1:$api_port" WEBHOOK_SECRET="$DEV_STRIPE_SECRET" \
    ADYEN_SIMULATOR_PORT="$adyen_port" ADYEN_HMAC_KEY="$DEV_ADYEN_HMAC_KEY" \
    ADYEN_WEBHOOK_USERNAME="$DEV_ADYEN_USER" ADYEN_WEBHOOK_PASSWORD="$DEV_ADYEN_PASSWORD" \
    "$bin" serve >>"$log" 2>&1 &
  psp_pid=$!
  wait_for_port "$port" "the PSP simulator"
  wait_for_port "$adyen_port" "the PSP simulator's Adyen side"
  export PSP_BASE_URL="http://127.0.0.1:$port"
  export ADYEN_BASE_URL="http://127.0.0.1:$adyen_port"
  # https, as the template's AdyenReturnUrl must be: the functions run as in Lambda, where a redirect URL is
  # https only (the shop's page is never fetched: the demo's shopper hands redirectResult on itself).
  export ADYEN_RETURN_URL="${ADYEN_RETURN_URL:-https://shop.localhost/checkout/return}"
}

# The template's functions' binaries (each `Metadata.BuildProperties.Binary`, what `sam build` packages as
# its bootstrap), built for this host, and the local world that runs them (local/stack, docs/LOCAL.md).
build_stack() {
  local bins
  bins="$(sed -n 's/^ *Binary: *//p' "$root/infra/template.yaml" | sort -u | sed 's/^/--bin /' | tr '\n' ' ')"
  echo "== building the functions for this host (cargo build $bins) and local-stack; the first build takes minutes" >&2
  # shellcheck disable=SC2086
  cargo build $bins --bin local-stack
}

# Builds and starts the local world (local/stack: infra/template.yaml's functions, each its own processes,
# triggered as the template declares) on 127.0.0.1:$1 in the background, its output to $2 (default: this
# terminal): what it started, one line per request, the functions' errors and warnings; each function's whole
# log goes to .local/logs/$TABLE_NAME/<LogicalId>.log. Sets api_pid. The template's parameters
# come from this environment (the PSP simulator's or your PSP's, the webhook providers, the EventBridge source,
# the capture method); the waits the tests shorten are the stack's --set, and its schedules run 60 times as
# often (--time-scale 60): a rate(1 minute) every second.
start_api() {
  local port="$1" log="${2:-/dev/stdout}"
  build_stack
  local bin="${CARGO_TARGET_DIR:-$root/target}/debug/local-stack"
  # The default providers and Adyen's endpoint (test mode; its secrets are in local_env's WEBHOOK_SECRETS).
  local providers='[{"name":"stripe","scheme":"stripe"},{"name":"standard","scheme":"standard"},{"name":"adyen","scheme":"adyen","livemode":false}]'
  # The orchestrator's role: the local world's credentials stand for a session of it (docs/LOCAL.md).
  local params=("WebhookProviders=${WEBHOOK_PROVIDERS:-$providers}" "RecoveryStaleAfterSeconds=${RECOVERY_STALE_AFTER_SECONDS:-10}"
    "OrchestratorRoleArn=arn:aws:iam::123456789012:role/local-orchestrator")
  [ -n "${PSP_BASE_URL:-}" ] && params+=("PspBaseUrl=$PSP_BASE_URL")
  [ -n "${PSP_REDIRECTS:-}" ] && params+=("PspRedirects=$PSP_REDIRECTS")
  [ -n "${PSP_RETURN_URL:-}" ] && params+=("PspRedirects=allowed" "PspReturnUrl=$PSP_RETURN_URL")
  [ -n "${STRIPE_EVENT_SOURCE:-}" ] && params+=("StripePartnerEventSource=$STRIPE_EVENT_SOURCE")
  [ -n "${ADYEN_BASE_URL:-}" ] && params+=("AdyenBaseUrl=$ADYEN_BASE_URL" "AdyenMerchantAccount=${ADYEN_MERCHANT_ACCOUNT:-}" "AdyenReturnUrl=${ADYEN_RETURN_URL:-}")
  [ -n "${SAGA_PSP:-}" ] && params+=("SagaPsp=$SAGA_PSP")
  [ -n "${STRIPE_CAPTURE_METHOD:-}" ] && params+=("StripeCaptureMethod=$STRIPE_CAPTURE_METHOD")
  local sets=(--set "CATCHUP_SETTLE_SECONDS=${CATCHUP_SETTLE_SECONDS:-5}" --set "SAGA_STUCK_AFTER_SECONDS=${SAGA_STUCK_AFTER_SECONDS:-10}")
  [ -n "${SAGA_PAYMENT_TIMEOUT_SECONDS:-}" ] && sets+=(--set "SAGA_PAYMENT_TIMEOUT_SECONDS=$SAGA_PAYMENT_TIMEOUT_SECONDS")
  [ -n "${CHECKOUT_ABANDON_AFTER_SECONDS:-}" ] && sets+=(--set "CHECKOUT_ABANDON_AFTER_SECONDS=$CHECKOUT_ABANDON_AFTER_SECONDS")
  # AWS_ENDPOINT_URL: any other service a function calls (EventBridge's DescribeEventSource) stays on this machine.
  AWS_ENDPOINT_URL="${AWS_ENDPOINT_URL_SQS:-}" LOCAL_API_PORT="$port" "$bin" --time-scale 60 "${sets[@]}" "${params[@]}" >>"$log" 2>&1 &
  api_pid=$!
  wait_for_port "$port" "the local API" "$api_pid" "$log"
}

# Prints the command that runs an arm64 Linux binary on this x86-64 machine: Debian's qemu-user
# (`qemu-aarch64`) with the arm64 C library of `libc6-arm64-cross` as the loader's root (`-L`). Installs both
# with apt-get when either is missing (as root, else through sudo); its output goes to stderr.
qemu_arm64() {
  local libc=/usr/aarch64-linux-gnu
  if ! command -v qemu-aarch64 >/dev/null || [ ! -e "$libc/lib/ld-linux-aarch64.so.1" ]; then
    echo "== installing qemu-user and libc6-arm64-cross (apt-get)" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      qemu-user libc6-arm64-cross >&2
  fi
  echo "$(command -v qemu-aarch64) -L $libc"
}
