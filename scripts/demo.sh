#!/usr/bin/env bash
# demo.sh: the provider end to end on this machine.
#
# Builds the provider and the test backend, starts the backend on a free
# local port, points Terraform at the local provider build (dev_overrides),
# applies examples/quickstart (a Python sandbox, a run-mode job with
# wait_for_exit and its logs), prints the outputs, runs code in the sandbox
# through the API with curl, destroys everything and stops the backend.
#
# Needs what `make setup` installs (Docker engine with gVisor, template
# images); `make demo` runs setup first. Environment:
#   DEMO_PORT      port for the backend (default: a free one)
#   DEMO_KEEP=1    keep the work directory (state, logs) afterwards
#   TF=tofu        use OpenTofu instead of Terraform (`make demo TF=tofu`;
#                  the tofu that make setup builds, unless one is on PATH)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TF=${TF:-terraform}
if [[ $TF == tofu ]] && ! command -v tofu >/dev/null && [[ -x /usr/local/lib/rarecloud/bin/tofu ]]; then
	TF=/usr/local/lib/rarecloud/bin/tofu
fi
TF_NAME=$(basename "$TF")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rarecloud-demo.XXXXXX")
BACKEND_PID=""
APPLIED=0
DESTROYED=0

if [[ -t 1 ]]; then
	say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
else
	say() { printf '\n==> %s\n' "$*"; }
fi

cleanup() {
	local rc=$?
	set +e
	if [[ $APPLIED == 1 && $DESTROYED == 0 ]]; then
		say "cleaning up: $TF_NAME destroy"
		(cd "$WORK/tf" && "$TF" destroy -auto-approve -input=false -no-color >"$WORK/destroy-on-exit.log" 2>&1) ||
			echo "destroy failed; see $WORK/destroy-on-exit.log" >&2
	fi
	if [[ -n $BACKEND_PID ]] && kill -0 "$BACKEND_PID" 2>/dev/null; then
		kill -TERM "$BACKEND_PID" 2>/dev/null
		for _ in $(seq 1 100); do
			kill -0 "$BACKEND_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$BACKEND_PID" 2>/dev/null; then
			kill -KILL "$BACKEND_PID" 2>/dev/null
		fi
		wait "$BACKEND_PID" 2>/dev/null
	fi
	if [[ $rc != 0 ]]; then
		echo "demo failed (exit $rc). Backend log:" >&2
		tail -n 40 "$WORK/backend.log" >&2 2>/dev/null
		echo "work directory kept: $WORK" >&2
	elif [[ ${DEMO_KEEP:-0} == 1 ]]; then
		echo "work directory kept: $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
	local p
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	echo "no free port found" >&2
	return 1
}

for tool in go "$TF" curl; do
	command -v "$tool" >/dev/null || { echo "demo.sh needs $tool on PATH" >&2; exit 1; }
done

say "building the provider and the test backend"
mkdir -p "$WORK/bin" "$WORK/data" "$WORK/tf"
go build -o "$WORK/bin/terraform-provider-rarecloud" .
go build -o "$WORK/bin/rarecloud-testbackend" ./testbackend/cmd/rarecloud-testbackend

PORT=${DEMO_PORT:-$(free_port)}
API="http://127.0.0.1:$PORT/v1"
say "starting the test backend on $API"
"$WORK/bin/rarecloud-testbackend" --listen "127.0.0.1:$PORT" --data "$WORK/data" --pull never \
	>"$WORK/backend.log" 2>&1 &
BACKEND_PID=$!

TOKEN_FILE="$WORK/data/dev-token"
for i in $(seq 1 300); do
	if ! kill -0 "$BACKEND_PID" 2>/dev/null; then
		echo "the backend exited while starting" >&2
		exit 1
	fi
	if [[ -s $TOKEN_FILE ]] &&
		curl -fsS -o /dev/null -H "Authorization: Bearer $(cat "$TOKEN_FILE")" "$API/sandboxes/templates" 2>/dev/null; then
		break
	fi
	if [[ $i == 300 ]]; then
		echo "the backend did not answer within 60 s" >&2
		exit 1
	fi
	sleep 0.2
done
TOKEN=$(tr -d '[:space:]' <"$TOKEN_FILE")
echo "backend ready (pid $BACKEND_PID), development token in $TOKEN_FILE"

# The CLI uses the provider just built, and no registry (dev_overrides
# work alike in Terraform and OpenTofu: the unqualified source
# rarecloudio/rarecloud is overridden on either default registry host).
cat >"$WORK/terraformrc" <<CFG
provider_installation {
  dev_overrides {
    "rarecloudio/rarecloud" = "$WORK/bin"
  }
  direct {}
}
CFG
export TF_CLI_CONFIG_FILE="$WORK/terraformrc"
export TF_IN_AUTOMATION=1
export CHECKPOINT_DISABLE=1
export RARECLOUD_API="$API"
export RARECLOUD_TOKEN="$TOKEN"

cp examples/quickstart/*.tf "$WORK/tf/"
cd "$WORK/tf"

say "$TF_NAME apply (examples/quickstart)"
APPLIED=1
"$TF" apply -auto-approve -input=false -no-color

SANDBOX_ID=$("$TF" output -raw sandbox_id)
JOB_EXIT=$("$TF" output -raw job_exit_code)

say "outputs"
echo "sandbox id:          $SANDBOX_ID"
echo "sandbox expires at:  $("$TF" output -raw sandbox_expires_at)"
echo "job id:              $("$TF" output -raw job_id)"
echo "job exit code:       $JOB_EXIT"
echo "job logs:"
"$TF" output -raw job_logs | sed 's/^/  | /'

say "running code in $SANDBOX_ID through the API"
echo "curl -s $API/sandboxes/$SANDBOX_ID/run_code -d '{\"language\": \"python\", \"code\": \"print(2 + 2)\"}'"
ANSWER=$(curl -sS "$API/sandboxes/$SANDBOX_ID/run_code" \
	-H "Authorization: Bearer $RARECLOUD_TOKEN" \
	-H "Content-Type: application/json" \
	-d '{"language": "python", "code": "print(2 + 2)"}')
if command -v jq >/dev/null; then
	echo "$ANSWER" | jq .data
	RESULT=$(echo "$ANSWER" | jq -r .data.stdout)
else
	echo "$ANSWER"
	RESULT=$(echo "$ANSWER" | sed -n 's/.*"stdout":"\([^"]*\)".*/\1/p' | sed 's/\\n$//')
fi
echo "2 + 2 = $(echo "$RESULT" | tr -d '[:space:]')"
if [[ $(echo "$RESULT" | tr -d '[:space:]') != 4 ]]; then
	echo "unexpected answer from run_code" >&2
	exit 1
fi
if [[ $JOB_EXIT != 0 ]]; then
	echo "the job exited with $JOB_EXIT" >&2
	exit 1
fi

say "$TF_NAME destroy"
"$TF" destroy -auto-approve -input=false -no-color
DESTROYED=1

say "demo finished"
