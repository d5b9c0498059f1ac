"""The Helm chart (deploy/helm/slotune) as its tests see it, without a cluster.

* :func:`render` — Helm's own engine (the ``helm-python-sdk`` wheel binds Helm v4's Go
  library: the same template functions, ``values.schema.json`` check and ``fail``/``required``
  as ``helm template``), one release, parsed into objects.
* :func:`kubernetes_problems` — every object against the Kubernetes API's OpenAPI schemas
  (``kubernetes-validate``, strict: an unknown field is an error, as ``kubectl apply``'s
  server-side field validation makes it), and ``RayCluster``/``RayJob`` against KubeRay's CRD
  schemas (``tests/fixtures/kuberay``, v1.7.0) made strict the same way.
* What the cluster would do with a rendered object, for running it here: the ``ray start``
  command KubeRay builds from ``rayStartParams`` (:func:`kuberay_ray_start`), a container's
  environment as the kubelet resolves it (:func:`container_env`), every pod template of an
  object (:func:`pod_templates`).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import yaml

from tests.support.paths import REPO

CHART = REPO / "deploy" / "helm" / "slotune"
PROFILES = {
    "default": None,
    "gpu": CHART / "ci" / "gpu-values.yaml",
    "sim": CHART / "ci" / "sim-values.yaml",
    "sweep": CHART / "ci" / "sweep-values.yaml",
}
"""The values the chart must render and validate with: its defaults and the ci/ profiles."""
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
"""The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest known."""
CRD_FIXTURES = REPO / "tests" / "fixtures" / "kuberay"

Obj = dict[str, Any]


class ChartRefused(Exception):
    """Helm refused the values (schema or a template's ``fail``); the message is Helm's."""


def profile_values(profile: str) -> Obj:
    path = PROFILES[profile]
    return {} if path is None else dict(yaml.safe_load(path.read_text()))


def render(values: Mapping[str, Any] | None = None, *, release: str = "slotune",
           namespace: str = "slotune") -> list[Obj]:
    """The chart's objects for ``values`` (on top of values.yaml), as ``helm template`` would."""
    manifests = _manifests(values, release, namespace)
    objects = []
    for path in sorted(manifests):
        if not path.endswith("NOTES.txt"):
            objects.extend(doc for doc in yaml.safe_load_all(manifests[path]) if doc)
    return objects


def notes(values: Mapping[str, Any] | None = None) -> str:
    """What ``helm install`` prints after installing (templates/NOTES.txt)."""
    manifests = _manifests(values, "slotune", "slotune")
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def _manifests(values: Mapping[str, Any] | None, release: str, namespace: str
               ) -> dict[str, str]:
    chart = helm_python.Chart.load(CHART)
    try:
        return chart.render(dict(values or {}), name=release, namespace=namespace,
                            is_install=True)
    except (helm_python.HelmRenderError, helm_python.HelmValuesError) as exc:
        raise ChartRefused(str(exc)) from exc
    finally:
        chart.close()


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind
             and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} × {kind} {name or ''}"
    return found[0]


def merged(*layers: Mapping[str, Any]) -> Obj:
    """Values layered as ``-f a.yaml -f b.yaml``: maps merge, anything else is replaced."""
    out: Obj = {}
    for layer in layers:
        out = _merge(out, layer)
    return out


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> Obj:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --- Schemas -------------------------------------------------------------------------------

def kubernetes_problems(obj: Obj) -> list[str]:
    """Why the API server would refuse ``obj`` (empty: it would accept it)."""
    if obj["apiVersion"] == "ray.io/v1":
        return _crd_problems(obj)
    problems = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            problems.append(f"k8s {version}: {obj['kind']}/{obj['metadata']['name']}: "
                            f"{where}: {exc.message}")
    return problems


def _crd_problems(obj: Obj) -> list[str]:
    validator = _crd_validator(obj["kind"])
    problems = [f"KubeRay {obj['kind']}/{obj['metadata']['name']}: "
                f"{'.'.join(str(p) for p in e.path)}: {e.message}"
                for e in validator.iter_errors(obj)]
    # The CRD leaves metadata to the API server, which checks it as any object's.
    meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
    problems += [p.replace("ConfigMap/", f"{obj['kind']}/")
                 for p in kubernetes_problems(meta)]
    return problems


@functools.cache
def _crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    fixture = json.loads((CRD_FIXTURES / f"{kind.lower()}s.v1.json").read_text())
    schema = strict_structural(fixture["openAPIV3Schema"])
    return jsonschema.Draft202012Validator(schema)


def strict_structural(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema, with the API server's rules: ``nullable``
    admits null, ``x-kubernetes-preserve-unknown-fields`` keeps unknown fields, and any other
    object with declared properties refuses a field it does not declare (strict field
    validation, what ``kubectl apply`` asks for)."""
    if not isinstance(schema, dict):
        return schema
    out: Obj = {}
    for key, value in schema.items():
        if key in ("items", "not") or (key == "additionalProperties"
                                        and isinstance(value, dict)):
            out[key] = strict_structural(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [strict_structural(v) for v in value]
        elif key == "properties":
            out[key] = {name: strict_structural(v) for name, v in value.items()}
        elif key == "nullable" or key.startswith("x-kubernetes-"):
            continue
        else:
            out[key] = value
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


# --- What the cluster does with the objects ------------------------------------------------

def pod_templates(obj: Obj) -> Iterator[tuple[str, Obj]]:
    """(where, pod template) of every pod ``obj`` makes, KubeRay's included."""
    spec = obj.get("spec", {})
    if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
        yield obj["kind"], spec["template"]
    elif obj["kind"] == "RayCluster":
        yield from _ray_templates("RayCluster", spec)
    elif obj["kind"] == "RayJob":
        yield from _ray_templates("RayJob", spec["rayClusterSpec"])
        if "submitterPodTemplate" in spec:
            yield "RayJob submitter", spec["submitterPodTemplate"]


def _ray_templates(where: str, spec: Obj) -> Iterator[tuple[str, Obj]]:
    yield f"{where} head", spec["headGroupSpec"]["template"]
    for group in spec.get("workerGroupSpecs", []):
        yield f"{where} worker group {group['groupName']}", group["template"]


def kuberay_ray_start(params: Mapping[str, str], *, head: bool) -> str:
    """The ``ray start`` command KubeRay (v1.7.0, ``generateRayStartCommand`` and
    ``convertParamMap`` in ray-operator/controllers/ray/common/pod.go) writes into the Ray
    container's ``bash -c``: flags sorted by name, ``--key=value``, a ``"true"`` value a
    bare flag and ``"false"`` dropped (except a few booleans that take a value)."""
    with_value = {"log-color", "include-dashboard", "include-log-monitor"}
    flags = []
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in with_value:
            if value.lower() == "true":
                flags.append(f"--{key}")
        else:
            flags.append(f"--{key}={value}")
    return " ".join(["ray", "start", *(["--head"] if head else []), *flags])


_DEPENDENT = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_env(container: Obj, *, secrets: Mapping[str, Mapping[str, str]],
                  config_maps: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The environment the kubelet gives ``container``: ``envFrom`` ConfigMaps, then ``env``
    in order with ``secretKeyRef`` values from ``secrets`` (name → key → value) and
    ``$(VAR)`` references to variables defined before expanded. A missing Secret key is
    left out when the reference is ``optional``, else a KeyError (the pod would not start)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = _DEPENDENT.sub(
                lambda m: env.get(m.group(1), m.group(0)), str(var["value"]))
            continue
        ref = var["valueFrom"]["secretKeyRef"]
        value = secrets.get(ref["name"], {}).get(ref["key"])
        if value is None:
            if ref.get("optional"):
                continue
            raise KeyError(f"{var['name']}: Secret {ref['name']} has no key {ref['key']}")
        env[var["name"]] = value
    return env


def config_maps(objects: list[Obj]) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: dict(o.get("data") or {})
            for o in objects if o["kind"] == "ConfigMap"}
