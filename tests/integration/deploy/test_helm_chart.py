"""The Helm chart renders, validates, and says what slotune's code expects — no cluster.

Rendered with Helm's own engine for its defaults and the ci/ profiles (a GPU fleet, simulated
GPUs, one sweep as a RayJob); every object checked against the Kubernetes API schemas and,
for RayCluster/RayJob, KubeRay's CRD schemas (tests/support/chart.py). The Ray nodes'
resources are checked against what the coordinator's own code asks a trial to need
(``slotune.workers.trial.ray_worker.trial_resources``), so the chart and the code cannot disagree on
a resource name; bad values are refused at render time with the value named.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import helm_python
import pytest

from slotune.tuner.settings import TrustSettings
from slotune.workers.contracts import SLO, TrialSpec, Workload
from slotune.workers.trial.ray_worker import GPU_TYPES_ENV, parse_gpu_types, trial_resources
from tests.support.chart import (
    CHART,
    PROFILES,
    ChartRefused,
    Obj,
    kubernetes_problems,
    merged,
    notes,
    one,
    pod_templates,
    profile_values,
    render,
)

KINDS = {
    "default": {"ConfigMap", "ServiceAccount", "Deployment", "Service", "StatefulSet",
                "RayCluster"},
    "gpu": {"ConfigMap", "ServiceAccount", "Deployment", "Service", "Ingress", "RayCluster",
            "PersistentVolumeClaim"},
    "sim": {"ConfigMap", "ServiceAccount", "Deployment", "Service", "StatefulSet",
            "RayCluster"},
    "sweep": {"ConfigMap", "ServiceAccount", "Deployment", "Service", "StatefulSet", "RayJob"},
}
SECRET_NAMES = {"slotune-api", "slotune-ray", "slotune-postgres", "slotune-hf",
                "slotune-database"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {profile: render(profile_values(profile)) for profile in PROFILES}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_object_validates_against_kubernetes_and_kuberay(
        rendered: dict[str, list[Obj]], profile: str) -> None:
    objects = rendered[profile]
    assert {o["kind"] for o in objects} == KINDS[profile]
    problems = [p for o in objects for p in kubernetes_problems(o)]
    assert problems == []
    # Secrets are the operator's: the chart never renders one.
    assert all(o["kind"] != "Secret" for o in objects)


def test_the_validators_refuse_what_the_api_server_would() -> None:
    """A misspelt field in a Deployment and in a RayCluster's worker template is found."""
    objects = render()
    api = one(objects, "Deployment", "slotune-api")
    api["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    assert any("'resource' was unexpected" in p for p in kubernetes_problems(api))
    cluster = one(objects, "RayCluster")
    group = cluster["spec"]["workerGroupSpecs"][0]
    group["rayStartParams"]["num-gpus"] = 2  # KubeRay wants strings
    group["template"]["spec"]["containers"][0]["envv"] = []
    problems = kubernetes_problems(cluster)
    assert any("rayStartParams.num-gpus: 2 is not of type 'string'" in p for p in problems)
    assert any("'envv' was unexpected" in p for p in problems)


def test_helm_lint_passes_strict() -> None:
    for profile in PROFILES:
        report = helm_python.lint(CHART, profile_values(profile), strict=True)
        assert report["errors"] == [], report
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def _containers(objects: list[Obj]) -> list[tuple[str, str, Obj, Obj]]:
    """(where, init|main, pod spec, container) of every container the chart's pods run."""
    out = []
    for obj in objects:
        for where, template in pod_templates(obj):
            spec = template["spec"]
            out += [(where, "init", spec, c) for c in spec.get("initContainers", [])]
            out += [(where, "main", spec, c) for c in spec["containers"]]
    return out


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_container_is_non_root_read_only_with_requests_and_probes(
        rendered: dict[str, list[Obj]], profile: str) -> None:
    containers = _containers(rendered[profile])
    assert len(containers) >= 5
    for where, role, pod, container in containers:
        name = f"{where}: {container['name']}"
        context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert context.get("runAsNonRoot") is True, name
        assert context.get("runAsUser", 0) > 0, name
        assert context.get("readOnlyRootFilesystem") is True, name
        assert context.get("allowPrivilegeEscalation") is False, name
        assert context.get("capabilities", {}).get("drop") == ["ALL"], name
        requests = container.get("resources", {}).get("requests", {})
        assert {"cpu", "memory"} <= set(requests), name
        assert "memory" in container["resources"].get("limits", {}), name
        # What runs until stopped is probed; the migrations and the sweep's submitter run to
        # completion (Kubernetes allows no probes on an init container).
        if role == "main" and where != "RayJob submitter":
            assert {"livenessProbe", "readinessProbe"} <= set(container), name
        # A read-only root: everything written goes to a volume.
        mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
        assert "/tmp" in mounts, name
    # KubeRay's autoscaler sidecar is configured the same way through autoscalerOptions.
    for obj in rendered[profile]:
        if obj["kind"] in ("RayCluster", "RayJob"):
            spec = obj["spec"].get("rayClusterSpec", obj["spec"])
            autoscaler = spec["autoscalerOptions"]
            assert {"cpu", "memory"} <= set(autoscaler["resources"]["requests"])
            assert autoscaler["securityContext"]["readOnlyRootFilesystem"] is True
            assert {"name": "tmp", "mountPath": "/tmp"} in autoscaler["volumeMounts"]


def _gpu_groups(cluster: Obj) -> dict[str, Obj]:
    return {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}


def _advertised(group: Obj) -> dict[str, float]:
    """The custom resources a node of ``group`` advertises: KubeRay passes the value to
    `ray start --resources=…` inside `bash -c`, which strips the single quotes."""
    [word] = shlex.split(group["rayStartParams"]["resources"])
    return dict(json.loads(word))


def _spec(engine: str, gpu: str, tp: int = 1) -> TrialSpec:
    return TrialSpec(run_id="chart", engine=engine, model="Qwen/Qwen2.5-7B-Instruct",
                     knobs={"tensor_parallel_size": tp}, workload=Workload(),
                     slo=SLO(ttft=300), gpu=gpu)


def test_gpu_workers_advertise_what_a_trial_asks_for(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["gpu"]
    cluster = one(objects, "RayCluster")
    head = cluster["spec"]["headGroupSpec"]["rayStartParams"]
    assert (head["num-cpus"], head["num-gpus"]) == ("0", "0")  # the head runs no trial
    config = one(objects, "ConfigMap", "slotune-config")["data"]
    mapping = parse_gpu_types(config[GPU_TYPES_ENV])
    groups = _gpu_groups(cluster)
    assert set(groups) == {"h100", "a100"}
    values = {g["name"]: g for g in profile_values("gpu")["workerGroups"]}
    for name, group in groups.items():
        gpus = values[name]["gpus"]
        params = group["rayStartParams"]
        [container] = group["template"]["spec"]["containers"]
        assert params["num-gpus"] == str(gpus)
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
        assert params["num-cpus"] == str(values[name]["cpus"])
        assert _advertised(group) == {f"gpu_type:{values[name]['gpuType']}": gpus}
        assert (group["minReplicas"], group["maxReplicas"]) == (0, values[name]["maxReplicas"])
        spec = group["template"]["spec"]
        assert spec["nodeSelector"] == values[name]["nodeSelector"]
        assert spec["tolerations"] == values[name]["tolerations"]
        assert container["image"].startswith("registry.example.com/slotune/slotune-vllm-worker:")
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["shm"]["emptyDir"] == {"medium": "Memory",
                                              "sizeLimit": values[name]["shmSize"]}
        assert volumes["model-cache"]["persistentVolumeClaim"]["claimName"] == \
            "slotune-model-cache"
        env = {e["name"]: e for e in container["env"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert env["HF_HOME"]["value"].startswith(mounts["model-cache"] + "/")
        assert env["SLOTUNE_ENGINE_CACHE_DIR"]["value"].startswith(mounts["model-cache"] + "/")
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "slotune-hf"
        assert mounts["shm"] == "/dev/shm"
    # The coordinator's own code, with the chart's SLOTUNE_GPU_TYPES, asks each group for
    # exactly the resource that group's nodes advertise — a full node's worth fits.
    for space_gpu, group_name in (("h100-sxm", "h100"), ("a100-80g", "a100")):
        group = groups[group_name]
        gpus = values[group_name]["gpus"]
        asked = trial_resources(_spec("vllm", space_gpu, tp=gpus), mapping)
        assert asked == _advertised(group), space_gpu
    # The largest node an autoscaler may add, for trials no running node could hold yet.
    assert config["SLOTUNE_MAX_NODE_GPUS"] == "8"


def test_a_simulated_group_advertises_every_gpu_its_trials_name(
        rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["sim"]
    [group] = one(objects, "RayCluster")["spec"]["workerGroupSpecs"]
    advertised = _advertised(group)
    values = profile_values("sim")["workerGroups"][0]
    assert advertised == {f"gpu_type:{t}": values["gpus"] for t in values["gpuTypes"]}
    assert group["rayStartParams"]["num-gpus"] == str(values["gpus"])
    [container] = group["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])  # any node will do
    assert container["image"] == "slotune:0.1.0"
    config = one(objects, "ConfigMap", "slotune-config")["data"]
    mapping = parse_gpu_types(config.get(GPU_TYPES_ENV))
    for gpu in values["gpuTypes"]:
        assert trial_resources(_spec("sim", gpu, tp=2), mapping) == {f"gpu_type:{gpu}": 2}


def _uses(container: Obj) -> set[str]:
    """The names of the secrets a container reads, as Secret/key."""
    return {f"{e['valueFrom']['secretKeyRef']['name']}/{e['valueFrom']['secretKeyRef']['key']}"
            for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}


def test_secrets_only_from_secrets_and_each_only_where_needed(
        rendered: dict[str, list[Obj]]) -> None:
    """Who holds which secret (the guide's trust model): the API never Ray's token, the Ray
    nodes never the API's tokens or the database, GPU workers the Hugging Face token."""
    for profile, objects in rendered.items():
        for where, _, _, container in _containers(objects):
            name = f"{profile} {where}: {container['name']}"
            for var in container.get("env", []):
                if any(w in var["name"] for w in ("TOKEN", "PASSWORD")):
                    assert "valueFrom" in var, name  # never a literal value
                if var["name"] == "DATABASE_URL" and "value" in var:
                    assert "$(POSTGRES_PASSWORD)" in var["value"], name
            used = _uses(container)
            assert {u.split("/")[0] for u in used} <= SECRET_NAMES, name
            if where.endswith(("Deployment", "StatefulSet")) and container["name"] == "api":
                assert "slotune-ray/auth_token" not in used, name
            if "worker group" in where:
                assert not any(u.startswith(("slotune-api/", "slotune-postgres/",
                                             "slotune-database/")) for u in used), name
                assert "slotune-ray/auth_token" in used, name
            if container["name"] == "coordinator":
                assert not any(u.startswith("slotune-api/") for u in used), name
                assert "slotune-ray/auth_token" in used, name
    # KubeRay gives the autoscaler and the sweep's submitter the same Ray token.
    for profile, kind in (("default", "RayCluster"), ("sweep", "RayJob")):
        obj = one(rendered[profile], kind)
        spec = obj["spec"] if kind == "RayCluster" else obj["spec"]["rayClusterSpec"]
        assert spec["authOptions"] == {"mode": "token", "secretName": "slotune-ray"}
    # An external database's URL is a Secret too; with it, no Postgres is installed.
    gpu = rendered["gpu"]
    coordinator = one(gpu, "Deployment", "slotune-coordinator")
    assert "slotune-database/DATABASE_URL" in _uses(
        coordinator["spec"]["template"]["spec"]["containers"][0])
    assert not [o for o in gpu if o["kind"] == "StatefulSet"]


def test_operator_configuration_reaches_every_slotune_container(
        rendered: dict[str, list[Obj]]) -> None:
    """operator.* becomes one ConfigMap every slotune process reads as its environment
    (the variable names live in one place: templates/_helpers.tpl, slotune.operatorEnv)."""
    objects = render(merged(profile_values("gpu"), {"extraEnv": [
        {"name": "SLOTUNE_EXTRA", "value": "1"}]}))
    config = one(objects, "ConfigMap", "slotune-config")["data"]
    # the names and shapes issue 38's registries read (slotune.workers.trust, TrustSettings): a
    # value the API server would refuse to start with fails here
    assert json.loads(config["SLOTUNE_ENGINE_BINARIES"]) == {"vllm": "/usr/local/bin/vllm"}
    assert json.loads(config["SLOTUNE_QUALITY_COMMANDS"]) == {"golden-mmlu": {
        "argv": ["python3", "/opt/checks/mmlu.py", "--limit", "200"], "timeout_s": 1800}}
    assert json.loads(config["SLOTUNE_DATA_DIRS"]) == ["/data/traces"]
    trust = TrustSettings.model_validate({name: config[name] for name in (
        "SLOTUNE_ENGINE_BINARIES", "SLOTUNE_QUALITY_COMMANDS", "SLOTUNE_DATA_DIRS")})
    assert trust.engine_binaries == {"vllm": "/usr/local/bin/vllm"}
    assert trust.quality_commands["golden-mmlu"].timeout_s == 1800
    assert [str(d) for d in trust.data_dirs] == ["/data/traces"]
    assert config["SLOTUNE_LOG_LEVEL"] == "info"
    slotune_containers = [(w, c) for w, _, _, c in _containers(objects)
                          if not c["image"].startswith("postgres:")]
    assert {c["name"] for _, c in slotune_containers} >= {"api", "migrate", "coordinator",
                                                          "ray-head", "ray-worker"}
    for where, container in slotune_containers:
        assert {"configMapRef": {"name": "slotune-config"}} in container["envFrom"], where
        assert {"name": "SLOTUNE_EXTRA", "value": "1"} in container["env"], where
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/data/traces" in mounts, where  # the operator's data directory
    # A changed operator setting restarts the pods that read it.
    before = one(objects, "Deployment", "slotune-api")
    after = one(render(merged(profile_values("gpu"), {"operator": {"env": {"X": "2"}}})),
                "Deployment", "slotune-api")
    checksum = "checksum/config"
    assert before["spec"]["template"]["metadata"]["annotations"][checksum] != \
        after["spec"]["template"]["metadata"]["annotations"][checksum]


def test_one_ray_and_python_version_everywhere(rendered: dict[str, list[Obj]]) -> None:
    for profile, objects in rendered.items():
        for obj in objects:
            if obj["kind"] == "RayCluster":
                assert obj["spec"]["rayVersion"] == "2.60.0"
            if obj["kind"] == "RayJob":
                assert obj["spec"]["rayClusterSpec"]["rayVersion"] == "2.60.0"
            for where, template in pod_templates(obj):
                assert template["metadata"]["labels"]["slotune.io/ray-version"] == "2.60.0", \
                    f"{profile} {where}"


def test_the_sweep_job_runs_its_arguments_as_given() -> None:
    """The RayJob's entrypoint is a shell string (Ray's job supervisor runs it with a
    shell): each argument is quoted, so a value can never become a second command."""
    args = ["--space", "/etc/slotune/spaces/it's mine.yaml", "--trials", "3",
            "--slo", "ttft:300;tpot:50 $(id)"]
    objects = render(merged(profile_values("sweep"), {"sweepJob": {"args": args}}))
    job = one(objects, "RayJob")
    assert shlex.split(job["spec"]["entrypoint"]) == ["slotune", "sweep", "run", *args]
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["metadata"]["name"] == "slotune-sweep-2026-12-01"
    # Its driver runs on the head: the head has the database; the long-lived cluster's not.
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "DATABASE_URL" in {e["name"] for e in head["env"]}
    cluster_head = one(render(), "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    assert "DATABASE_URL" not in {e["name"] for e in cluster_head["containers"][0]["env"]}
    assert "slotune-sweep-2026-12-01" in notes(profile_values("sweep"))


GROUP = {"name": "g", "gpuType": "h100-sxm", "gpus": 1, "cpus": 1, "memory": "1Gi",
         "maxReplicas": 1}
UNTYPED = {k: v for k, v in GROUP.items() if k != "gpuType"}
BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    ("no worker group", {"workerGroups": []}, "workerGroups is empty"),
    ("no worker group for the sweep job", merged(profile_values("sweep"), {"workerGroups": []}),
     "workerGroups is empty"),
    ("a GPU group with zero GPUs", {"workerGroups": [{**GROUP, "gpus": 0}]},
     "/workerGroups/0/gpus"),
    ("a GPU group without a GPU type", {"workerGroups": [UNTYPED]},
     "workerGroups[0] (g).gpuType is empty"),
    ("a misspelt group key", {"workerGroups": [{**GROUP, "gpu": 2}]},
     "additional properties 'gpu' not allowed"),
    ("two groups of one name", {"workerGroups": [GROUP, GROUP]},
     "the name g is used by two worker groups"),
    ("min above max", {"workerGroups": [{**GROUP, "minReplicas": 3, "maxReplicas": 2}]},
     "workerGroups[0] (g).minReplicas (3) is above maxReplicas (2)"),
    ("a simulated group shadowing a GPU group",
     {"workerGroups": [GROUP, {**UNTYPED, "name": "s", "simulated": True,
                               "gpuTypes": ["h100-sxm"]}]},
     "advertises gpu_type:h100-sxm, which GPU group g has"),
    ("a derived ray start flag set by hand",
     {"workerGroups": [{**GROUP, "rayStartParams": {"num-gpus": "4"}}]},
     "workerGroups[0] (g).rayStartParams.num-gpus is set"),
    ("a head that would run trials", {"rayCluster": {"head": {"rayStartParams": {
        "num-cpus": "8"}}}}, "rayCluster.head.rayStartParams.num-cpus is set"),
    ("the API token's Secret unnamed", {"secrets": {"apiToken": {"name": ""}}},
     "secrets.apiToken.name is empty"),
    ("Ray's token's Secret unnamed", {"secrets": {"rayToken": {"name": ""}}},
     "secrets.rayToken.name is empty"),
    ("Postgres' password's Secret unnamed", {"secrets": {"postgresPassword": {"name": ""}}},
     "secrets.postgresPassword.name is empty"),
    ("an external database without its Secret", {"postgres": {"enabled": False}},
     "secrets.databaseUrl.name is empty while postgres.enabled is false"),
    ("the GPU image on another Ray", {"images": {"vllmWorker": {"rayVersion": "2.59.0"}}},
     "images.vllmWorker.rayVersion is 2.59.0 but ray.version is 2.60.0"),
    ("a group's image on another Ray",
     {"workerGroups": [{**GROUP, "image": {"repository": "x", "rayVersion": "2.61.0"}}]},
     "workerGroups[0].image.rayVersion is 2.61.0 but ray.version is 2.60.0"),
    ("the slotune image on another Python", {"images": {"slotune": {"pythonVersion": "3.11"}}},
     "images.slotune.pythonVersion is 3.11 but ray.pythonVersion is 3.12"),
    ("a Ray version that is none", {"ray": {"version": "latest"}}, "/ray/version"),
    ("a coordinator without a Ray cluster", {"rayCluster": {"enabled": False}},
     "coordinator.enabled is true but rayCluster.enabled is false"),
    ("an ingress without a host", {"api": {"ingress": {"enabled": True}}},
     "api.ingress.host is empty"),
]


@pytest.mark.parametrize(("values", "message"), [(v, m) for _, v, m in BAD_VALUES],
                         ids=[name for name, _, _ in BAD_VALUES])
def test_bad_values_are_refused_at_render_time_naming_the_value(
        values: dict[str, Any], message: str) -> None:
    with pytest.raises(ChartRefused) as refused:
        render(values)
    assert message in str(refused.value)
