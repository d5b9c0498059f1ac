{{/*
The Ray cluster's spec, shared by the RayCluster (rayCluster.enabled) and the sweep job's
RayJob (sweepJob.enabled), so both run the same head and the same worker groups.

KubeRay turns rayStartParams into the container's `ray start` command (sorted `--key=value`
flags; "true" is a bare flag; it adds --address and --block), so the nodes' resources are
declared here and nowhere else:
  head:    num-cpus "0", num-gpus "0": Ray's GCS and dashboard, never a trial;
  workers: num-gpus = gpus, num-cpus = cpus, resources = {"gpu_type:<type>": gpus} for the
           group's gpuType (a simulated group: each of its gpuTypes), one unit per GPU —
           what slotune/workers/trial/ray_worker.py's trials ask for, as docker/entrypoint.sh's
           ray-worker role advertises it in the compose stack.
*/}}

{{/* rayStartParams of a worker group: (dict "group" $g) */}}
{{- define "slotune.workerRayStartParams" -}}
{{- $g := .group -}}
{{- $resources := dict -}}
{{- $types := ternary $g.gpuTypes (list $g.gpuType) (eq $g.simulated true) -}}
{{- range $types }}{{ $_ := set $resources (printf "gpu_type:%s" .) (int $g.gpus) }}{{ end -}}
{{- $params := dict "num-gpus" (toString (int $g.gpus)) "num-cpus" (toString (int $g.cpus)) "resources" (printf "'%s'" (toJson $resources)) -}}
{{- range $k, $v := $g.rayStartParams }}{{ $_ := set $params $k (toString $v) }}{{ end -}}
{{- toYaml $params -}}
{{- end -}}

{{- define "slotune.headRayStartParams" -}}
{{- $params := dict "num-cpus" "0" "num-gpus" "0" "dashboard-host" "0.0.0.0" -}}
{{- range $k, $v := .Values.rayCluster.head.rayStartParams }}{{ $_ := set $params $k (toString $v) }}{{ end -}}
{{- toYaml $params -}}
{{- end -}}

{{/* Exec probes of a Ray node: its raylet is alive and the head answers (docker/healthcheck.py). */}}
{{- define "slotune.rayNodeProbes" -}}
startupProbe:
  exec:
    command: [slotune-healthcheck, ray-node]
  periodSeconds: 5
  timeoutSeconds: 10
  failureThreshold: 120
readinessProbe:
  exec:
    command: [slotune-healthcheck, ray-node]
  periodSeconds: 10
  timeoutSeconds: 10
  failureThreshold: 3
livenessProbe:
  exec:
    command: [slotune-healthcheck, ray-node]
  periodSeconds: 20
  timeoutSeconds: 10
  failureThreshold: 6
{{- end -}}

{{/* spec of a RayCluster: (dict "root" $ "sweep" true|false) */}}
{{- define "slotune.rayClusterSpec" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $autoscaling := $v.rayCluster.autoscaling.enabled -}}
rayVersion: {{ $v.ray.version | quote }}
# Ray's RPCs need the token from secrets.rayToken (key auth_token); KubeRay gives it to the
# autoscaler and the sweep job's submitter too.
authOptions:
  mode: token
  secretName: {{ $v.secrets.rayToken.name }}
enableInTreeAutoscaling: {{ $autoscaling }}
{{- if $autoscaling }}
autoscalerOptions:
  idleTimeoutSeconds: {{ $v.rayCluster.autoscaling.idleTimeoutSeconds }}
  upscalingMode: {{ $v.rayCluster.autoscaling.upscalingMode }}
  imagePullPolicy: {{ $v.images.slotune.pullPolicy }}
  resources:
    {{- toYaml $v.rayCluster.autoscaling.resources | nindent 4 }}
  securityContext:
    {{- include "slotune.containerSecurityContext" $root | nindent 4 }}
  env:
    {{- include "slotune.commonEnv" $root | nindent 4 }}
  # Its root file system is read-only too: the head pod's /tmp (KubeRay mounts Ray's log
  # folder, /tmp/ray, into both).
  volumeMounts:
    - name: tmp
      mountPath: /tmp
{{- end }}
headGroupSpec:
  serviceType: ClusterIP
  rayStartParams:
    {{- include "slotune.headRayStartParams" $root | nindent 4 }}
  template:
    metadata:
      labels:
        {{- include "slotune.podLabels" (dict "root" $root "component" "ray-head") | nindent 8 }}
      annotations:
        checksum/config: {{ include "slotune.operatorEnv" $root | sha256sum }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- if not $autoscaling }}
      # With autoscaling, KubeRay gives the head its own service account (the autoscaler
      # scales worker pods through the Kubernetes API).
      automountServiceAccountToken: false
      {{- end }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      {{- include "slotune.imagePullSecrets" (dict "root" $root "indent" 6) }}
      containers:
        - name: ray-head
          image: {{ include "slotune.image" (dict "root" $root "image" $v.images.slotune) }}
          imagePullPolicy: {{ $v.images.slotune.pullPolicy }}
          ports:
            - {name: gcs-server, containerPort: 6379}
            - {name: dashboard, containerPort: 8265}
            - {name: client, containerPort: 10001}
          env:
            {{- include "slotune.commonEnv" $root | nindent 12 }}
            # The health check (and any `ray` command run here) asks this node's own GCS.
            - name: RAY_ADDRESS
              value: 127.0.0.1:6379
            {{- include "slotune.rayAuthEnv" $root | nindent 12 }}
            {{- if .sweep }}
            # The sweep's driver (`slotune sweep run`) runs on the head and writes the database.
            {{- include "slotune.databaseEnv" $root | nindent 12 }}
            {{- end }}
          envFrom:
            {{- include "slotune.envFrom" $root | nindent 12 }}
          {{- include "slotune.rayNodeProbes" $root | nindent 10 }}
          resources:
            {{- toYaml $v.rayCluster.head.resources | nindent 12 }}
          securityContext:
            {{- include "slotune.containerSecurityContext" $root | nindent 12 }}
          volumeMounts:
            {{- include "slotune.volumeMounts" $root | nindent 12 }}
            - name: shm
              mountPath: /dev/shm
      volumes:
        {{- include "slotune.volumes" $root | nindent 8 }}
        {{- include "slotune.shmVolume" (dict "size" $v.rayCluster.head.shmSize) | nindent 8 }}
      {{- include "slotune.scheduling" (dict "s" $v.rayCluster.head "indent" 6) }}
workerGroupSpecs:
{{- range $g := $v.workerGroups }}
{{- $real := not $g.simulated }}
{{- $image := default (ternary $v.images.vllmWorker $v.images.slotune $real) $g.image }}
  - groupName: {{ $g.name }}
    replicas: {{ int (default (default 0 $g.minReplicas) $g.replicas) }}
    minReplicas: {{ int (default 0 $g.minReplicas) }}
    maxReplicas: {{ int $g.maxReplicas }}
    rayStartParams:
      {{- include "slotune.workerRayStartParams" (dict "group" $g) | nindent 6 }}
    template:
      metadata:
        labels:
          {{- include "slotune.podLabels" (dict "root" $root "component" "ray-worker") | nindent 10 }}
          slotune.io/worker-group: {{ $g.name }}
        annotations:
          checksum/config: {{ include "slotune.operatorEnv" $root | sha256sum }}
          {{- with $v.podAnnotations }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
      spec:
        automountServiceAccountToken: false
        securityContext:
          {{- toYaml $v.podSecurityContext | nindent 10 }}
        {{- include "slotune.imagePullSecrets" (dict "root" $root "indent" 8) }}
        containers:
          - name: ray-worker
            image: {{ include "slotune.image" (dict "root" $root "image" $image) }}
            imagePullPolicy: {{ default "IfNotPresent" $image.pullPolicy }}
            env:
              {{- include "slotune.commonEnv" $root | nindent 14 }}
              {{- include "slotune.rayAuthEnv" $root | nindent 14 }}
              {{- if $real }}
              {{- include "slotune.hfEnv" $root | nindent 14 }}
              # Model downloads and vLLM's compile caches outlive a trial on this volume.
              - name: HF_HOME
                value: {{ printf "%s/huggingface" $v.modelCache.mountPath }}
              - name: SLOTUNE_ENGINE_CACHE_DIR
                value: {{ printf "%s/engines" $v.modelCache.mountPath }}
              {{- end }}
            envFrom:
              {{- include "slotune.envFrom" $root | nindent 14 }}
            {{- include "slotune.rayNodeProbes" $root | nindent 12 }}
            resources:
              requests:
                cpu: {{ $g.cpus | quote }}
                memory: {{ $g.memory | quote }}
                {{- if $real }}
                {{ $v.gpuResourceName }}: {{ $g.gpus | quote }}
                {{- end }}
              limits:
                memory: {{ $g.memory | quote }}
                {{- if $real }}
                {{ $v.gpuResourceName }}: {{ $g.gpus | quote }}
                {{- end }}
            securityContext:
              {{- include "slotune.containerSecurityContext" $root | nindent 14 }}
            volumeMounts:
              {{- include "slotune.volumeMounts" $root | nindent 14 }}
              - name: shm
                mountPath: /dev/shm
              {{- if $real }}
              - name: model-cache
                mountPath: {{ $v.modelCache.mountPath }}
              {{- end }}
        volumes:
          {{- include "slotune.volumes" $root | nindent 10 }}
          {{- include "slotune.shmVolume" (dict "size" (default "2Gi" $g.shmSize)) | nindent 10 }}
          {{- if $real }}
          - name: model-cache
            {{- if $v.modelCache.claim.create }}
            persistentVolumeClaim:
              claimName: {{ include "slotune.fullname" $root }}-model-cache
            {{- else }}
            {{- toYaml $v.modelCache.volume | nindent 12 }}
            {{- end }}
          {{- end }}
        {{- include "slotune.scheduling" (dict "s" $g "indent" 8) }}
{{- end }}
{{- end -}}
