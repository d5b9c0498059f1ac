{{/*
Names, labels, images, and the pieces every slotune container shares: its environment
(operator ConfigMap, database, Ray token), its writable volumes, its security context.
One definition each, so the API, the coordinator, the Ray head and the workers agree.
*/}}

{{- define "slotune.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "slotune.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "slotune.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "slotune.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slotune
{{- end -}}

{{/* selectorLabels: (dict "root" $ "component" "api") */}}
{{- define "slotune.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slotune.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Pod labels: selector labels, the Ray version every image shares, podLabels. */}}
{{- define "slotune.podLabels" -}}
{{ include "slotune.selectorLabels" . }}
slotune.io/ray-version: {{ .root.Values.ray.version | quote }}
{{- with .root.Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "slotune.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "slotune.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The RayCluster's name: KubeRay derives pod and service names from it (<name>-head-svc). */}}
{{- define "slotune.rayClusterName" -}}
{{- include "slotune.fullname" . | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Where the coordinator finds the Ray head (KubeRay's head service, GCS port). */}}
{{- define "slotune.rayAddress" -}}
{{- printf "%s-head-svc:6379" (include "slotune.rayClusterName" .) -}}
{{- end -}}

{{- define "slotune.configMapName" -}}
{{- printf "%s-config" (include "slotune.fullname" .) -}}
{{- end -}}

{{- define "slotune.spacesConfigMapName" -}}
{{- printf "%s-spaces" (include "slotune.fullname" .) -}}
{{- end -}}

{{- define "slotune.postgresHost" -}}
{{- printf "%s-postgres" (include "slotune.fullname" .) -}}
{{- end -}}

{{/* image: (dict "root" $ "image" .Values.images.slotune) -> repository:tag */}}
{{- define "slotune.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag | toString) -}}
{{- end -}}

{{/* POSIX shell quoting of one word: 'it'\''s' (for the RayJob's entrypoint string). */}}
{{- define "slotune.shellQuote" -}}
{{- printf "'%s'" (replace "'" "'\\''" (toString .)) -}}
{{- end -}}

{{/*
The operator's configuration as environment variables (the ConfigMap <release>-config).
The variable names of issue 38's registries are set here and only here:
  operator.engines        -> SLOTUNE_ENGINE_BINARIES  JSON {name: binary path}
  operator.qualityChecks  -> SLOTUNE_QUALITY_COMMANDS JSON {name: {argv, timeout_s}}
  operator.dataDirs       -> SLOTUNE_DATA_DIRS        JSON [directory, …] (the map's values)
and what the chart knows of the cluster:
  SLOTUNE_GPU_TYPES       space GPU=worker group gpuType, for vLLM trials (gpuTypeMap and
                          the identity of every GPU group's gpuType)
  SLOTUNE_MAX_NODE_GPUS   the GPUs of the largest worker group's pod (an autoscaler may add
                          it while none runs)
then operator.env as given.
*/}}
{{- define "slotune.operatorEnv" -}}
{{- $env := dict -}}
{{- with .Values.operator.engines }}{{ $_ := set $env "SLOTUNE_ENGINE_BINARIES" (toJson .) }}{{ end -}}
{{- with .Values.operator.qualityChecks }}{{ $_ := set $env "SLOTUNE_QUALITY_COMMANDS" (toJson .) }}{{ end -}}
{{- with .Values.operator.dataDirs }}{{ $dirs := list }}{{ range $name := keys . | sortAlpha }}{{ $dirs = append $dirs (get $.Values.operator.dataDirs $name) }}{{ end }}{{ $_ := set $env "SLOTUNE_DATA_DIRS" (toJson $dirs) }}{{ end -}}
{{- $types := dict -}}
{{- $maxGpus := 0 -}}
{{- range .Values.workerGroups -}}
{{- if and (not .simulated) .gpuType }}{{ $_ := set $types .gpuType .gpuType }}{{ end -}}
{{- if gt (int .gpus) $maxGpus }}{{ $maxGpus = int .gpus }}{{ end -}}
{{- end -}}
{{- range $space, $label := .Values.gpuTypeMap }}{{ $_ := set $types $space $label }}{{ end -}}
{{- if $types -}}
{{- $pairs := list -}}
{{- range $space := keys $types | sortAlpha }}{{ $pairs = append $pairs (printf "%s=%s" $space (get $types $space)) }}{{ end -}}
{{- $_ := set $env "SLOTUNE_GPU_TYPES" (join "," $pairs) -}}
{{- end -}}
{{- if gt $maxGpus 0 }}{{ $_ := set $env "SLOTUNE_MAX_NODE_GPUS" (toString $maxGpus) }}{{ end -}}
{{- range $name, $value := .Values.operator.env }}{{ $_ := set $env $name (toString $value) }}{{ end -}}
{{- toYaml $env -}}
{{- end -}}

{{/* Environment every slotune container shares. */}}
{{- define "slotune.commonEnv" -}}
# A read-only root file system: Python writes no bytecode, and whatever expects a home
# directory (Ray, torch, Triton) gets the writable /tmp. USER lets getpass.getuser()
# answer for a uid the image has no passwd entry for.
- name: HOME
  value: /tmp
- name: USER
  value: slotune
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "slotune.envFrom" -}}
- configMapRef:
    name: {{ include "slotune.configMapName" . }}
{{- end -}}

{{/* DATABASE_URL: the in-chart Postgres (password from its Secret) or an external URL. */}}
{{- define "slotune.databaseEnv" -}}
{{- if .Values.postgres.enabled -}}
- name: POSTGRES_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.postgresPassword.name }}
      key: {{ .Values.secrets.postgresPassword.key }}
# Kubernetes expands $(POSTGRES_PASSWORD) from the variable above (a password made of
# URL-safe characters: openssl rand -hex).
- name: DATABASE_URL
  value: {{ printf "postgresql://%s:$(POSTGRES_PASSWORD)@%s:5432/%s" .Values.postgres.user (include "slotune.postgresHost" .) .Values.postgres.database | quote }}
{{- else -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.databaseUrl.name }}
      key: {{ .Values.secrets.databaseUrl.key }}
{{- end }}
{{- end -}}

{{/* Ray's RPC token: the key KubeRay itself reads (authOptions.secretName). */}}
{{- define "slotune.rayAuthEnv" -}}
- name: RAY_AUTH_MODE
  value: token
- name: RAY_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.rayToken.name }}
      key: auth_token
{{- end -}}

{{- define "slotune.hfEnv" -}}
{{- if .Values.secrets.hfToken.name -}}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.hfToken.name }}
      key: {{ .Values.secrets.hfToken.key }}
{{- end }}
{{- end -}}

{{/* Writable volumes of a slotune pod: /tmp, the data directory, spaces, extraVolumes. */}}
{{- define "slotune.volumes" -}}
- name: tmp
  emptyDir: {}
- name: data
  emptyDir: {}
{{- if .Values.spaces }}
- name: spaces
  configMap:
    name: {{ include "slotune.spacesConfigMapName" . }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "slotune.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
# SLOTUNE_HOME in the image: reports and anything else slotune writes locally.
- name: data
  mountPath: /var/lib/slotune
{{- if .Values.spaces }}
- name: spaces
  mountPath: /etc/slotune/spaces
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* /dev/shm as memory: (dict "name" "shm" "size" "2Gi") */}}
{{- define "slotune.shmVolume" -}}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .size }}
{{- end -}}

{{- define "slotune.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext -}}
{{- end -}}

{{/* imagePullSecrets of a pod: (dict "root" $ "indent" 6); nothing when there are none. */}}
{{- define "slotune.imagePullSecrets" -}}
{{- with .root.Values.imagePullSecrets }}{{ printf "imagePullSecrets:\n%s" (toYaml . | indent 2) | nindent (int $.indent) }}{{ end -}}
{{- end -}}

{{/* Scheduling of a pod: (dict "s" <values with nodeSelector/tolerations/affinity> "indent" 6);
nothing at all when none is set. */}}
{{- define "slotune.scheduling" -}}
{{- $n := int .indent -}}
{{- with .s.nodeSelector }}{{ printf "nodeSelector:\n%s" (toYaml . | indent 2) | nindent $n }}{{ end -}}
{{- with .s.tolerations }}{{ printf "tolerations:\n%s" (toYaml . | indent 2) | nindent $n }}{{ end -}}
{{- with .s.affinity }}{{ printf "affinity:\n%s" (toYaml . | indent 2) | nindent $n }}{{ end -}}
{{- end -}}

{{/* The migrations init container of the API and coordinator pods. */}}
{{- define "slotune.migrateInitContainer" -}}
- name: migrate
  image: {{ include "slotune.image" (dict "root" . "image" .Values.images.slotune) }}
  imagePullPolicy: {{ .Values.images.slotune.pullPolicy }}
  command: [slotune, db, upgrade]
  env:
    {{- include "slotune.commonEnv" . | nindent 4 }}
    {{- include "slotune.databaseEnv" . | nindent 4 }}
  envFrom:
    {{- include "slotune.envFrom" . | nindent 4 }}
  resources:
    {{- toYaml .Values.migrations.resources | nindent 4 }}
  securityContext:
    {{- include "slotune.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    {{- include "slotune.volumeMounts" . | nindent 4 }}
{{- end -}}
