"""Offline checks of the Kubernetes manifests in deploy/kubernetes (run by validate.sh).

1. Every resource against the Kubernetes JSON schemas of one pinned Kubernetes version, in
   strict mode (an unknown field fails), with `kubernetes-validate`. A kind the schemas do
   not know fails too (the library itself would only warn). YAML keys given twice fail.
2. cert-manager's resources (cert-manager.io/v1), which are not in those schemas: their
   fields against the cert-manager v1 fields listed below, and tenure's rules for node and
   client certificates (docs/SECURITY.md).
3. Every `tenure` command line, in the containers' commands, in the scripts the manifests
   carry and in the shell and YAML blocks of docs/KUBERNETES.md: each subcommand exists and
   each `--flag` is one that `tenure SUBCOMMAND --help` of the real binary lists.
4. That the pieces agree: the Secrets the pods mount are the ones cert-manager makes and the
   docs create, the certificates name the addresses the nodes and clients use, the image's
   user is the one the pods run as.

Prints one line per check and a last line `validate: N passed, M failed`; exits 1 if any
check failed.
"""

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes_validate import utils as kv


# ---------------------------------------------------------------------------------------
# Results.


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, what):
        self.passed += 1
        print(f"ok    {what}")

    def fail(self, what):
        self.failed += 1
        print(f"FAIL  {what}")

    def check(self, condition, what, why=""):
        if condition:
            self.ok(what)
        else:
            self.fail(f"{what}: {why}" if why else what)
        return condition


# ---------------------------------------------------------------------------------------
# YAML.


class StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (plain PyYAML keeps the
    last one, and so would hide a mistake)."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice", key_node.start_mark
            )
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(path):
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=StrictLoader) if d]


def name_of(resource):
    return f"{resource.get('kind', '?')}/{resource.get('metadata', {}).get('name', '?')}"


# ---------------------------------------------------------------------------------------
# cert-manager.io/v1: the fields of its API (cert-manager's v1 API reference). Only the
# parts these manifests use are checked below the top level.

CM_CERTIFICATE_SPEC = {
    "additionalOutputFormats", "commonName", "dnsNames", "duration", "emailAddresses",
    "encodeUsagesInRequest", "ipAddresses", "isCA", "issuerRef", "keystores",
    "literalSubject", "nameConstraints", "otherNames", "privateKey", "renewBefore",
    "renewBeforePercentage", "revisionHistoryLimit", "secretName", "secretTemplate",
    "signatureAlgorithm", "subject", "uris", "usages",
}
CM_ISSUER_SPEC = {"acme", "ca", "selfSigned", "vault", "venafi"}
CM_ISSUER_REF = {"name", "kind", "group"}
CM_PRIVATE_KEY = {
    "algorithm": {"RSA", "ECDSA", "Ed25519"},
    "encoding": {"PKCS1", "PKCS8"},
    "rotationPolicy": {"Never", "Always"},
    "size": None,
}
CM_USAGES = {
    "signing", "digital signature", "content commitment", "key encipherment",
    "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
    "decipher only", "any", "server auth", "client auth", "code signing",
    "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user",
    "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
}
CM_CA = {"secretName", "crlDistributionPoints", "issuingCertificateURLs", "ocspServers"}
CM_SELF_SIGNED = {"crlDistributionPoints"}
METADATA = {"name", "namespace", "labels", "annotations"}
GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


def cert_manager_errors(r):
    """What is wrong with a cert-manager.io resource, as a list of messages."""
    errors = []
    if r.get("apiVersion") != "cert-manager.io/v1":
        return [f"apiVersion {r.get('apiVersion')!r}: only cert-manager.io/v1 is checked"]
    unknown = set(r) - {"apiVersion", "kind", "metadata", "spec"}
    if unknown:
        errors.append(f"unknown top-level fields {sorted(unknown)}")
    meta = r.get("metadata") or {}
    if not isinstance(meta, dict) or not meta.get("name"):
        errors.append("metadata.name is missing")
    elif set(meta) - METADATA:
        errors.append(f"unknown metadata fields {sorted(set(meta) - METADATA)}")
    spec = r.get("spec")
    if not isinstance(spec, dict):
        return errors + ["spec is missing"]
    kind = r.get("kind")
    if kind in ("Issuer", "ClusterIssuer"):
        if set(spec) - CM_ISSUER_SPEC:
            errors.append(f"unknown spec fields {sorted(set(spec) - CM_ISSUER_SPEC)}")
        if len(set(spec) & CM_ISSUER_SPEC) != 1:
            errors.append(f"spec names {len(set(spec) & CM_ISSUER_SPEC)} issuer types, not one")
        if "ca" in spec:
            ca = spec["ca"] or {}
            if set(ca) - CM_CA:
                errors.append(f"unknown spec.ca fields {sorted(set(ca) - CM_CA)}")
            if not ca.get("secretName"):
                errors.append("spec.ca.secretName is missing")
        if "selfSigned" in spec and set(spec["selfSigned"] or {}) - CM_SELF_SIGNED:
            errors.append("unknown spec.selfSigned fields")
    elif kind == "Certificate":
        if set(spec) - CM_CERTIFICATE_SPEC:
            errors.append(f"unknown spec fields {sorted(set(spec) - CM_CERTIFICATE_SPEC)}")
        for required in ("secretName", "issuerRef"):
            if not spec.get(required):
                errors.append(f"spec.{required} is missing")
        ref = spec.get("issuerRef") or {}
        if set(ref) - CM_ISSUER_REF or not ref.get("name"):
            errors.append("spec.issuerRef needs a name (and only name, kind, group)")
        key = spec.get("privateKey") or {}
        for field, value in key.items():
            if field not in CM_PRIVATE_KEY:
                errors.append(f"unknown spec.privateKey field {field!r}")
            elif CM_PRIVATE_KEY[field] and value not in CM_PRIVATE_KEY[field]:
                errors.append(f"spec.privateKey.{field} {value!r} is not one of {sorted(CM_PRIVATE_KEY[field])}")
        for usage in spec.get("usages") or []:
            if usage not in CM_USAGES:
                errors.append(f"spec.usages: {usage!r} is not a cert-manager usage")
        for field in ("duration", "renewBefore"):
            if field in spec and not GO_DURATION.match(str(spec[field])):
                errors.append(f"spec.{field} {spec[field]!r} is not a duration such as 2160h")
        if not isinstance(spec.get("dnsNames", []), list):
            errors.append("spec.dnsNames is not a list")
    else:
        errors.append(f"kind {kind!r} is not checked here (Issuer, ClusterIssuer, Certificate)")
    return errors


# ---------------------------------------------------------------------------------------
# The pods: containers, their commands, their volumes.


def pod_specs(r):
    """The pod specs a resource holds: a Pod's own, a workload's template, a CronJob's."""
    spec = r.get("spec") or {}
    kind = r.get("kind")
    if kind == "Pod":
        return [spec]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [spec.get("template", {}).get("spec", {})]
    if kind == "CronJob":
        return [spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})]
    return []


def containers(pod):
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(field) or []


def walk_containers(value):
    """Every mapping with a `command` list under `value` (for fragments in the docs)."""
    if isinstance(value, dict):
        if isinstance(value.get("command"), list):
            yield value
        for v in value.values():
            yield from walk_containers(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk_containers(v)


def env_value(container, name):
    for e in container.get("env") or []:
        if e.get("name") == name and "value" in e:
            return e["value"]
    return None


def secrets_of(pod):
    """(secret name, optional) for every Secret a pod mounts."""
    for v in pod.get("volumes") or []:
        if "secret" in v:
            yield v["secret"].get("secretName"), bool(v["secret"].get("optional"))
        for source in (v.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                yield source["secret"].get("name"), bool(source["secret"].get("optional"))


# ---------------------------------------------------------------------------------------
# `tenure` command lines.

SEPARATOR_CHARS = set(";&|(\n")
PUNCT = "();<>|&\n"
COMMAND_WORDS = {"exec", "then", "do", "else", "time", "nohup", "!", "{", "if", "while", "until", "--"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def strip_comments(text):
    """The script without its `#` comments: a `#` that starts a word outside quotes."""
    out = []
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote is None and c == "#" and (i == 0 or text[i - 1] in " \t\n;&|("):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        if c == "\\" and quote != "'" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            continue
        if quote is None and c in "'\"":
            quote = c
        elif c == quote:
            quote = None
        out.append(c)
        i += 1
    return "".join(out)


def shell_tokens(text):
    """Shell words and operators; a newline is an operator (it ends a command)."""
    text = strip_comments(text.replace("\\\n", " "))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=PUNCT)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def is_operator(token):
    return bool(token) and all(c in PUNCT for c in token)


class Binary:
    """`tenure … --help` of the real binary, read once per subcommand path."""

    OPTION = re.compile(r"^\s{1,8}(?:(-[A-Za-z0-9]),\s+)?(--[A-Za-z0-9][A-Za-z0-9-]*)")
    SHORT = re.compile(r"^\s{1,8}(-[A-Za-z0-9])(?:[\s,]|$)")
    COMMAND = re.compile(r"^\s{2}([a-z][a-z0-9-]*)(?:\s|$)")

    def __init__(self, path):
        self.path = path
        self.cache = {}

    def help(self, words):
        words = tuple(words)
        if words not in self.cache:
            try:
                run = subprocess.run(
                    [self.path, *words, "--help"], capture_output=True, text=True, timeout=30
                )
                self.cache[words] = (run.returncode, run.stdout + run.stderr)
            except OSError as e:
                self.cache[words] = (-1, str(e))
        return self.cache[words]

    def options(self, words):
        code, text = self.help(words)
        found = set()
        for line in text.splitlines():
            m = self.OPTION.match(line)
            if m:
                found.add(m.group(2))
                if m.group(1):
                    found.add(m.group(1))
                continue
            m = self.SHORT.match(line)
            if m:
                found.add(m.group(1))
        return code, found

    def subcommands(self, words):
        code, text = self.help(words)
        names, inside = set(), False
        for line in text.splitlines():
            if line.strip() == "Commands:":
                inside = True
                continue
            if inside:
                m = self.COMMAND.match(line)
                if m:
                    names.add(m.group(1))
                elif not line.strip():
                    inside = False
        names.discard("help")
        return names


def invocations(tokens, where, out):
    """Appends (where, words, args) for every `tenure` in command position in `tokens`, and
    looks into every word that holds a script of its own (`sh -c '…'`)."""
    for i, token in enumerate(tokens):
        if any(c in token for c in " \t\n") and not is_operator(token):
            # A word with spaces may be a script (`sh -c '…'`) or only text (a message).
            try:
                inner = shell_tokens(token)
            except ValueError:
                continue
            invocations(inner, where, out)
            continue
        if token != "tenure" and not token.endswith("/tenure"):
            continue
        before = tokens[i - 1] if i > 0 else None
        if not (
            before is None
            or (is_operator(before) and not set(before) & set("<>"))
            or before in COMMAND_WORDS
            or ASSIGNMENT.match(before)
        ):
            continue
        rest = []
        for t in tokens[i + 1 :]:
            if is_operator(t):
                break
            rest.append(t)
        out.append((where, rest))


def script(text, where, out, results):
    """The `tenure` command lines of a whole script (a file, a docs block)."""
    try:
        invocations(shell_tokens(text), where, out)
    except ValueError as e:
        results.fail(f"{where}: a script that does not parse as shell words: {e}")


def check_invocation(binary, where, rest, results, seen_servers, seen_certs):
    """Checks one `tenure REST…`: its subcommand path and every flag before `--`."""
    words = []
    while rest and rest[0] in binary.subcommands(words):
        words.append(rest.pop(0))
    line = " ".join(["tenure", *words])
    if not words:
        results.fail(f"{where}: `tenure {' '.join(rest[:2])}`: no subcommand of the binary")
        return
    code, options = binary.options(words)
    if code != 0 or "--help" not in options:
        results.fail(f"{where}: `{line} --help` did not list options (exit {code})")
        return
    flags, bad = [], []
    for arg in rest:
        if arg == "--":
            break
        if re.match(r"^--[A-Za-z0-9]", arg) or re.match(r"^-[A-Za-z]$", arg):
            flag = arg.split("=", 1)[0]
            flags.append(flag)
            if flag not in options:
                bad.append(flag)
    if bad:
        results.fail(f"{where}: `{line}` does not take {', '.join(bad)}")
    else:
        results.ok(f"{where}: `{line}` takes {' '.join(flags) if flags else 'no flags here'}")
    if words == ["server"]:
        seen_servers.append(rest)
    if words == ["certs"]:
        seen_certs.append(rest)


def flag_values(args, flag):
    """Every value of `--flag VALUE` or `--flag=VALUE` in `args`, comma lists split."""
    values = []
    for i, a in enumerate(args):
        if a == "--":
            break
        if a == flag and i + 1 < len(args):
            values.append(args[i + 1])
        elif a.startswith(flag + "="):
            values.append(a.split("=", 1)[1])
    return values


# ---------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubernetes-version", required=True)
    parser.add_argument("--tenure", required=True, help="the tenure binary")
    parser.add_argument("--root", required=True, help="the repository")
    args = parser.parse_args()

    root = Path(args.root)
    here = root / "deploy" / "kubernetes"
    doc = root / "docs" / "KUBERNETES.md"
    results = Results()

    # 1 and 2: each resource.
    resources = []  # (file, resource)
    files = sorted(p for p in here.rglob("*") if p.suffix in (".yaml", ".yml"))
    if not files:
        results.fail(f"no manifests under {here}")
    for path in files:
        rel = path.relative_to(root)
        try:
            docs = load(path)
        except yaml.YAMLError as e:
            results.fail(f"{rel}: cannot be read: {e}")
            continue
        for r in docs:
            if not isinstance(r, dict) or not r.get("apiVersion") or not r.get("kind"):
                results.fail(f"{rel}: a document that is not a resource (no apiVersion and kind)")
                continue
            resources.append((rel, r))
            what = f"{rel}: {name_of(r)}"
            if str(r.get("apiVersion", "")).startswith("cert-manager.io/"):
                errors = cert_manager_errors(r)
                results.check(not errors, f"{what} (cert-manager v1 fields)", "; ".join(errors))
                continue
            try:
                version = kv.validate(r, args.kubernetes_version, strict=True)
                results.ok(f"{what} (Kubernetes {version}, strict)")
            except kv.ValidationError as e:
                path_in = ".".join(str(p) for p in e.path)
                results.fail(f"{what}: {path_in}: {e.message}")
            except kv.SchemaNotFoundError as e:
                results.fail(f"{what}: {e.message}")
            except kv.VersionNotSupportedError as e:
                results.fail(f"{what}: {e.message}")
                break
            except Exception as e:  # the validator's own failure on an odd resource
                results.fail(f"{what}: could not be validated: {e}")

    # 3: every tenure command line.
    found = []
    for rel, r in resources:
        for pod in pod_specs(r):
            for c in containers(pod):
                where = f"{rel}: {name_of(r)} container {c.get('name')}"
                words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
                if not c.get("command") and str(c.get("image", "")).startswith("tenure:"):
                    words = ["tenure", *words]
                invocations(words, where, found)
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    command = ((c.get(probe) or {}).get("exec") or {}).get("command")
                    if command:
                        invocations([str(w) for w in command], f"{where} {probe}", found)
        if r.get("kind") == "ConfigMap":
            for key, value in (r.get("data") or {}).items():
                if key.endswith(".sh") or str(value).startswith("#!"):
                    script(str(value), f"{rel}: {name_of(r)} {key}", found, results)
    if doc.exists():
        text = doc.read_text()
        for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S):
            script(block, str(doc.relative_to(root)), found, results)
        # Container fragments in YAML blocks: their `command` and `args`.
        for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
            try:
                fragments = list(yaml.load_all(block, Loader=StrictLoader))
            except yaml.YAMLError as e:
                results.fail(f"{doc.relative_to(root)}: a YAML block does not parse: {e}")
                continue
            for c in walk_containers(fragments):
                words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
                invocations(words, f"{doc.relative_to(root)} (YAML block)", found)
    else:
        results.fail(f"{doc.relative_to(root)} is missing")

    binary = Binary(args.tenure)
    servers, certs = [], []
    binary_found = Path(args.tenure).is_file()
    if not binary_found:
        results.fail(
            f"the tenure binary {args.tenure} is missing: build it (`cargo build -p tenure-cli`) "
            "or name it in $TENURE_BIN"
        )
    else:
        results.check(found, "tenure command lines found", "none: is the scanner still reading them?")
        for where, rest in found:
            check_invocation(binary, where, list(rest), results, servers, certs)

    # 4: the pieces agree.
    try:
        consistency(resources, servers, certs, binary_found, doc, root, here, results)
    except (KeyError, TypeError, AttributeError) as e:
        results.fail(f"the consistency checks stopped on a resource they cannot read: {e!r}")

    print(f"validate: {results.passed} passed, {results.failed} failed")
    return 1 if results.failed else 0


def consistency(resources, servers, certs, binary_found, doc, root, here, results):
    """Check 4: the Secrets, certificate names, addresses and users agree."""
    cluster_ids = {v for s in servers for v in flag_values(s, "--cluster-id")} or {"tenure"}
    results.check(len(cluster_ids) == 1, "one cluster id in every `tenure server`", f"{sorted(cluster_ids)}")
    cluster = sorted(cluster_ids)[0]

    mounted = {}  # secret -> optional (False if any pod needs it)
    backends = set()
    users = set()
    for _, r in resources:
        for pod in pod_specs(r):
            users.add((pod.get("securityContext") or {}).get("runAsUser"))
            for name, optional in secrets_of(pod):
                mounted[name] = mounted.get(name, True) and optional
            for c in containers(pod):
                users.add((c.get("securityContext") or {}).get("runAsUser"))
                backend = env_value(c, "TENURE_BACKEND")
                if backend:
                    backends.add(backend)
    users.discard(None)
    client_hosts = set()
    for b in backends:
        m = re.match(r"^tenure://([^?]*)", b)
        for hostport in (m.group(1).split(",") if m else []):
            client_hosts.add(hostport.rsplit(":", 1)[0])
    results.check(client_hosts, "the clients' TENURE_BACKEND names the cluster", f"{sorted(backends)}")

    statefulsets = [r for _, r in resources if r.get("kind") == "StatefulSet"]
    services = {r["metadata"]["name"]: r for _, r in resources if r.get("kind") == "Service"}
    members = {}  # node id -> the pod's DNS name
    for sts in statefulsets:
        meta, spec = sts["metadata"], sts["spec"]
        svc = services.get(spec.get("serviceName"))
        results.check(
            svc is not None
            and svc["spec"].get("clusterIP") == "None"
            and svc["spec"].get("publishNotReadyAddresses") is True,
            f"{name_of(sts)}: serviceName {spec.get('serviceName')} is a headless Service that publishes not-ready pods",
        )
        domain = f"{spec.get('serviceName')}.{meta.get('namespace')}.svc.cluster.local"
        pod = spec["template"]["spec"]
        peer_domains = {env_value(c, "PEER_DOMAIN") for c in pod.get("containers") or []} - {None}
        results.check(peer_domains == {domain}, f"{name_of(sts)}: PEER_DOMAIN is {domain}", f"{sorted(peer_domains)}")
        for name, _ in secrets_of(pod):
            m = re.match(r"^tenure-node-(\d+)$", name or "")
            if m:
                n = int(m.group(1))
                members[n] = f"{meta['name']}-{n - 1}.{domain}"
        labels = spec["template"]["metadata"].get("labels", {})
        for _, pdb in resources:
            if pdb.get("kind") == "PodDisruptionBudget":
                wanted = pdb["spec"]["selector"].get("matchLabels", {})
                results.check(
                    wanted and all(labels.get(k) == v for k, v in wanted.items()),
                    f"{name_of(pdb)} selects {name_of(sts)}'s pods",
                )

    certificates = {
        r["spec"].get("secretName"): r
        for _, r in resources
        if r.get("kind") == "Certificate" and isinstance(r.get("spec"), dict)
    }
    for secret, optional in sorted(mounted.items()):
        if not optional:
            results.check(secret in certificates, f"Secret {secret}: made by a cert-manager Certificate")
        if doc.exists():
            results.check(secret in doc.read_text(), f"Secret {secret}: created in {doc.relative_to(root)}")
    for secret, cert in sorted(certificates.items()):
        spec = cert["spec"]
        names, usages = set(spec.get("dnsNames") or []), set(spec.get("usages") or [])
        m = re.match(r"^tenure-node-(\d+)$", secret or "")
        if m:
            n = int(m.group(1))
            wanted = {f"node-{n}.{cluster}.tenure", *client_hosts}
            if n in members:
                wanted.add(members[n])
            results.check(
                wanted <= names and {"server auth", "client auth"} <= usages,
                f"{name_of(cert)}: names {', '.join(sorted(wanted))}; server auth and client auth",
                f"missing {sorted(wanted - names)} {sorted({'server auth', 'client auth'} - usages)}",
            )
        m = re.match(r"^tenure-client-([a-z0-9-]+)$", secret or "")
        if m:
            wanted = f"client-{m.group(1)}.{cluster}.tenure"
            results.check(
                wanted in names and "client auth" in usages,
                f"{name_of(cert)}: names {wanted}; client auth",
            )
    for line in certs:
        hosts = set(flag_values(line, "--host"))
        nodes = {int(n) for v in flag_values(line, "--nodes") for n in v.split(",") if n.isdigit()}
        wanted = set(members.values()) | client_hosts
        results.check(
            wanted <= hosts and set(members) <= nodes and flag_values(line, "--cluster-id") == [cluster],
            f"{doc.relative_to(root)}: `tenure certs` issues nodes {sorted(members)} of cluster {cluster} for every member and client address",
            f"nodes {sorted(nodes)}, hosts missing {sorted(wanted - hosts)}, --cluster-id {flag_values(line, '--cluster-id')}",
        )
    if binary_found:
        results.check(certs, f"{doc.relative_to(root)} shows `tenure certs`", "no `tenure certs` line")

    dockerfile = here / "Dockerfile"
    m = re.search(r"^USER\s+(\d+)", dockerfile.read_text(), re.M) if dockerfile.exists() else None
    results.check(
        m is not None and users == {int(m.group(1))},
        f"the image's user is every pod's runAsUser ({sorted(users)})",
        f"Dockerfile USER {m.group(1) if m else 'missing'}",
    )


if __name__ == "__main__":
    sys.exit(main())
