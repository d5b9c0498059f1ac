#!/bin/sh
# slotune's container roles (docker-compose.yml). Everything comes from the environment:
#   api          migrate the database, then serve the REST API and dashboard
#   coordinator  join Ray as a zero-resource node (the driver needs a local node),
#                migrate, then run queued sweeps on the cluster
#   ray-head     the Ray head (GCS, dashboard); no CPUs or GPUs, so no trial runs on it
#   ray-worker   a Ray node with GPUs, typed with gpu_type:<name> resources (one unit
#                per GPU per advertised type); real GPUs are counted with nvidia-smi
# Anything else is run as given (e.g. `slotune sweep submit …`).
set -eu

RAY_PORT="${RAY_PORT:-6379}"
RAY_ADDRESS="${RAY_ADDRESS:-ray-head:${RAY_PORT}}"

migrate() {
    # The API and the coordinator both migrate at start; whichever loses a race (or
    # starts before Postgres accepts connections) tries again, and a second upgrade to
    # the same head is a no-op.
    attempts="${SLOTUNE_MIGRATE_ATTEMPTS:-10}"
    i=1
    while ! slotune db upgrade; do
        if [ "$i" -ge "$attempts" ]; then
            echo "slotune db upgrade failed $attempts times; giving up" >&2
            return 1
        fi
        echo "slotune db upgrade failed (attempt $i of $attempts); retrying in 3 s" >&2
        i=$((i + 1))
        sleep 3
    done
}

gpu_type_resources() {
    # gpu_type_resources "rtx4090,h100-sxm" 2 -> {"gpu_type:rtx4090": 2, "gpu_type:h100-sxm": 2}
    python3 - "$1" "$2" <<'PY'
import json, sys
names = [n.strip() for n in sys.argv[1].split(",") if n.strip()]
print(json.dumps({f"gpu_type:{n}": float(sys.argv[2]) for n in names}))
PY
}

require() {
    # require VAR…: refuse to start without the secrets this role needs (never printed).
    for name in "$@"; do
        eval "value=\${$name:-}"
        if [ -z "$value" ]; then
            echo "$role: refusing to start: $name is not set (see docs/deployment/index.md;" \
                 "e.g. openssl rand -hex 32)" >&2
            exit 2
        fi
    done
}

require_ray_token() {
    if [ "${RAY_AUTH_MODE:-token}" = "token" ]; then
        require RAY_AUTH_TOKEN
    fi
}

require_database_password() {
    case "${DATABASE_URL:-}" in
    postgresql://*:@*|postgres://*:@*)
        echo "$role: refusing to start: the database password is empty (set" \
             "POSTGRES_PASSWORD)" >&2
        exit 2
        ;;
    esac
}

role="${1:-api}"
case "$role" in
api)
    shift || true
    require SLOTUNE_API_TOKEN
    require_database_password
    migrate
    exec slotune api --host 0.0.0.0 --port "${SLOTUNE_API_PORT:-8080}" "$@"
    ;;
coordinator)
    shift || true
    require_ray_token
    require_database_password
    migrate
    ray start --address "$RAY_ADDRESS" --num-cpus 0 --num-gpus 0 --disable-usage-stats
    exec slotune coordinator --executor ray "$@"
    ;;
ray-head)
    shift || true
    require_ray_token
    exec ray start --head --port "$RAY_PORT" --num-cpus "${RAY_HEAD_NUM_CPUS:-0}" \
        --num-gpus 0 --dashboard-host 0.0.0.0 --dashboard-port 8265 \
        --disable-usage-stats --block "$@"
    ;;
ray-worker)
    shift || true
    require_ray_token
    gpus="${RAY_NUM_GPUS:-}"
    if [ -z "$gpus" ]; then
        gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
    fi
    if [ -z "$gpus" ] || [ "$gpus" -lt 1 ]; then
        echo "ray-worker: no GPUs (set RAY_NUM_GPUS for simulated ones)" >&2
        exit 1
    fi
    resources="$(gpu_type_resources "${RAY_GPU_TYPES:-}" "$gpus")"
    set -- --num-gpus "$gpus" --resources "$resources" "$@"
    if [ -n "${RAY_NUM_CPUS:-}" ]; then
        set -- --num-cpus "$RAY_NUM_CPUS" "$@"
    fi
    echo "ray-worker: joining $RAY_ADDRESS with $gpus GPUs, resources $resources"
    exec ray start --address "$RAY_ADDRESS" --disable-usage-stats --block "$@"
    ;;
*)
    exec "$@"
    ;;
esac
