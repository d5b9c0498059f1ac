{{/*
Render-time checks of what values.schema.json cannot say alone (it checks types, ranges,
names and unknown keys). Each failure names the value and what would work, so a values
file that could not run is refused by `helm install`/`helm template`, not at pod start.
*/}}
{{- define "slotune.validate" -}}
{{- $v := .Values -}}

{{- /* One Ray and one Python everywhere: what an image declares must be ray.* */ -}}
{{- $images := dict "images.slotune" $v.images.slotune "images.vllmWorker" $v.images.vllmWorker -}}
{{- range $i, $g := $v.workerGroups -}}
{{- with $g.image }}{{ $_ := set $images (printf "workerGroups[%d].image" $i) . }}{{ end -}}
{{- end -}}
{{- range $where := keys $images | sortAlpha -}}
{{- $image := get $images $where -}}
{{- if and $image.rayVersion (ne (toString $image.rayVersion) (toString $v.ray.version)) -}}
{{- fail (printf "%s.rayVersion is %s but ray.version is %s: Ray refuses mixed versions. Build every image with RAY_VERSION=%s (docker/Dockerfile, docker/Dockerfile.vllm), or set ray.version to the one all images share." $where (toString $image.rayVersion) (toString $v.ray.version) (toString $v.ray.version)) -}}
{{- end -}}
{{- if and $image.pythonVersion (ne (toString $image.pythonVersion) (toString $v.ray.pythonVersion)) -}}
{{- fail (printf "%s.pythonVersion is %s but ray.pythonVersion is %s: Ray refuses mixed Python versions. Build every image with PYTHON_VERSION=%s (for the vLLM image: a vLLM base image of that Python)." $where (toString $image.pythonVersion) (toString $v.ray.pythonVersion) (toString $v.ray.pythonVersion)) -}}
{{- end -}}
{{- end -}}

{{- /* Secrets: named where a component that is rendered needs them. */ -}}
{{- if $v.api.enabled -}}
{{- if not $v.secrets.apiToken.name -}}
{{- fail "secrets.apiToken.name is empty: name the Secret that holds the API's write token (key secrets.apiToken.key, SLOTUNE_API_TOKEN), e.g. kubectl create secret generic slotune-api --from-literal=SLOTUNE_API_TOKEN=$(openssl rand -hex 32)" -}}
{{- end -}}
{{- end -}}
{{- if or $v.rayCluster.enabled $v.sweepJob.enabled $v.coordinator.enabled -}}
{{- if not $v.secrets.rayToken.name -}}
{{- fail "secrets.rayToken.name is empty: name the Secret that holds Ray's token under the key auth_token, e.g. kubectl create secret generic slotune-ray --from-literal=auth_token=$(openssl rand -hex 32)" -}}
{{- end -}}
{{- end -}}
{{- if $v.postgres.enabled -}}
{{- if not $v.secrets.postgresPassword.name -}}
{{- fail "secrets.postgresPassword.name is empty: name the Secret that holds the in-chart Postgres' password (key secrets.postgresPassword.key), or set postgres.enabled=false and secrets.databaseUrl.name for an external database" -}}
{{- end -}}
{{- else if not $v.secrets.databaseUrl.name -}}
{{- fail "secrets.databaseUrl.name is empty while postgres.enabled is false: name the Secret that holds the external database's DATABASE_URL (key secrets.databaseUrl.key), or set postgres.enabled=true" -}}
{{- end -}}

{{- /* Worker groups: at least one wherever a Ray cluster is rendered, each able to run. */ -}}
{{- if or $v.rayCluster.enabled $v.sweepJob.enabled -}}
{{- if not $v.workerGroups -}}
{{- fail "workerGroups is empty: a Ray cluster with no worker group runs no trial. Add a GPU group ({name: h100, gpuType: h100-sxm, gpus: 8, …}) or a simulated one ({name: sim, simulated: true, gpuTypes: [rtx4090], gpus: 2, …})" -}}
{{- end -}}
{{- end -}}
{{- $names := dict -}}
{{- $realTypes := dict -}}
{{- range $i, $g := $v.workerGroups -}}
{{- $where := printf "workerGroups[%d] (%s)" $i $g.name -}}
{{- if hasKey $names $g.name -}}
{{- fail (printf "%s: the name %s is used by two worker groups; KubeRay needs each groupName once" $where $g.name) -}}
{{- end -}}
{{- $_ := set $names $g.name true -}}
{{- if lt (int $g.gpus) 1 -}}
{{- fail (printf "%s.gpus is %d: a worker group needs at least 1 GPU (a simulated group: simulated GPUs) — a trial asks for one GPU per tensor-parallel rank" $where (int $g.gpus)) -}}
{{- end -}}
{{- if $g.simulated -}}
{{- if not $g.gpuTypes -}}
{{- fail (printf "%s.gpuTypes is empty: a simulated group advertises the GPU names its sim trials ask for (the space's gpu), e.g. [rtx4090, h100-sxm]" $where) -}}
{{- end -}}
{{- if $g.gpuType -}}
{{- fail (printf "%s has gpuType %s and simulated: true: a simulated group lists its names in gpuTypes; a real GPU group has simulated: false" $where $g.gpuType) -}}
{{- end -}}
{{- else -}}
{{- if not $g.gpuType -}}
{{- fail (printf "%s.gpuType is empty: a GPU group advertises its GPU as gpu_type:<gpuType>, the resource the coordinator asks for (e.g. h100-sxm); for a group without GPUs set simulated: true" $where) -}}
{{- end -}}
{{- if $g.gpuTypes -}}
{{- fail (printf "%s.gpuTypes is set on a real GPU group: it has one GPU type, gpuType (gpuTypes is for simulated groups)" $where) -}}
{{- end -}}
{{- $_ := set $realTypes $g.gpuType $g.name -}}
{{- end -}}
{{- range $flag := list "num-gpus" "num-cpus" "resources" "address" "block" -}}
{{- if hasKey (default dict $g.rayStartParams) $flag -}}
{{- fail (printf "%s.rayStartParams.%s is set: the chart derives num-gpus, num-cpus and resources from gpus, cpus and the GPU type (what trials ask for), and KubeRay sets address and block. Set gpus/cpus/gpuType instead" $where $flag) -}}
{{- end -}}
{{- end -}}
{{- $min := int (default 0 $g.minReplicas) -}}
{{- $max := int (default 0 $g.maxReplicas) -}}
{{- $replicas := int (default $min $g.replicas) -}}
{{- if gt $min $max -}}
{{- fail (printf "%s.minReplicas (%d) is above maxReplicas (%d)" $where $min $max) -}}
{{- end -}}
{{- if or (lt $replicas $min) (gt $replicas $max) -}}
{{- fail (printf "%s.replicas (%d) is outside minReplicas..maxReplicas (%d..%d)" $where $replicas $min $max) -}}
{{- end -}}
{{- end -}}
{{- range $flag := list "num-gpus" "num-cpus" -}}
{{- if hasKey $v.rayCluster.head.rayStartParams $flag -}}
{{- fail (printf "rayCluster.head.rayStartParams.%s is set: the head runs no trial, its num-cpus and num-gpus are \"0\"" $flag) -}}
{{- end -}}
{{- end -}}
{{- /* A simulated node advertising a real group's type would take its vLLM trials. */ -}}
{{- range $i, $g := $v.workerGroups -}}
{{- if $g.simulated -}}
{{- range $g.gpuTypes -}}
{{- if hasKey $realTypes . -}}
{{- fail (printf "workerGroups[%d] (%s) is simulated and advertises gpu_type:%s, which GPU group %s has: a vLLM trial for %s could land on a node without GPUs. Remove %s from its gpuTypes" $i $g.name . (get $realTypes .) . .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- if and $v.coordinator.enabled (not $v.rayCluster.enabled) (not $v.coordinator.rayAddress) -}}
{{- fail "coordinator.enabled is true but rayCluster.enabled is false and coordinator.rayAddress is empty: the coordinator has no Ray cluster to run trials on. Enable rayCluster, give coordinator.rayAddress (host:6379 of another Ray head), or disable the coordinator (a sweepJob runs its own)" -}}
{{- end -}}
{{- if $v.sweepJob.enabled -}}
{{- if not $v.sweepJob.args -}}
{{- fail "sweepJob.args is empty: give `slotune sweep run`'s arguments, e.g. [--space, lab, --trials, \"10\"]" -}}
{{- end -}}
{{- end -}}
{{- if and $v.api.ingress.enabled (not $v.api.ingress.host) -}}
{{- fail "api.ingress.host is empty while api.ingress.enabled is true: give the host name the Ingress answers for" -}}
{{- end -}}
{{- end -}}
