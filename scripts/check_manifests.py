"""Loads every object of a rendered manifest stream (`kubectl kustomize deploy/kubernetes`) into
the official Kubernetes Python client's models, strictly: a field the model does not have, or
a value of the wrong type, is an error (the client's own deserializer would drop the one and
coerce the other). Objects of the Prometheus Operator's CRDs, which the client has no model
for, are checked against the fields the operator's schema requires.

Usage: kubectl kustomize deploy/kubernetes | python scripts/check_manifests.py
Exit 0 with one line per object; 1 with one line per error (its object and field path).
Needs the `kubernetes` and `PyYAML` packages (scripts/tools-env.sh installs them).
"""
import re
import sys

import yaml
from kubernetes import client

PRIMITIVE = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object,
             "datetime": str, "date": str, "bytes": str}
CRDS = {("monitoring.coreos.com/v1", "PodMonitor"): {"spec": ["selector", "podMetricsEndpoints"]}}


def check(value, type_name, path, errors):
    m = re.fullmatch(r"(?:list|List)\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            return errors.append(f"{path}: a list expected, got {type(value).__name__}")
        for i, v in enumerate(value):
            check(v, m.group(1), f"{path}[{i}]", errors)
        return None
    m = re.fullmatch(r"dict\(str, (.+)\)|Dict\[str, (.+)\]", type_name)
    if m:
        if not isinstance(value, dict):
            return errors.append(f"{path}: a map expected, got {type(value).__name__}")
        for k, v in value.items():
            check(v, m.group(1) or m.group(2), f"{path}.{k}", errors)
        return None
    if type_name in PRIMITIVE:
        want = PRIMITIVE[type_name]
        if type_name == "int" and isinstance(value, bool) or not isinstance(value, want):
            errors.append(f"{path}: {type_name} expected, got {value!r}")
        return None
    cls = getattr(client.models, type_name)
    if not isinstance(value, dict):
        return errors.append(f"{path}: a {type_name} object expected, got {value!r}")
    by_key = {key: attr for attr, key in cls.attribute_map.items()}
    for key, v in value.items():
        if key not in by_key:
            errors.append(f"{path}.{key}: {type_name} has no such field")
        else:
            check(v, cls.openapi_types[by_key[key]], f"{path}.{key}", errors)
    return None


def model_of(obj):
    group, _, version = obj["apiVersion"].rpartition("/")
    prefix = "V1" if version == "v1" else version.capitalize()
    return f"{prefix}{obj['kind']}"


def main():
    errors, seen = [], 0
    for obj in yaml.safe_load_all(sys.stdin):
        if not obj:
            continue
        seen += 1
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        crd = CRDS.get((obj.get("apiVersion"), obj.get("kind")))
        if crd is not None:
            for section, required in crd.items():
                for field in required:
                    if field not in obj.get(section, {}):
                        errors.append(f"{name}: {section}.{field} is required")
            print(f"{name}: the operator's required fields present")
            continue
        type_name = model_of(obj)
        if not hasattr(client.models, type_name):
            errors.append(f"{name}: no model {type_name} (apiVersion {obj['apiVersion']})")
            continue
        before = len(errors)
        check(obj, type_name, name, errors)
        if len(errors) == before:
            print(f"{name}: loads into {type_name}")
    for e in errors:
        print(e)
    if errors or not seen:
        sys.exit(1)


if __name__ == "__main__":
    main()
