//! The deployment recipes: examples/container/Containerfile,
//! examples/kubernetes/daemonset.yaml and examples/systemd's unit. The
//! DaemonSet is decoded strictly against the Kubernetes API types by the Go
//! test in examples/kubernetes/validate, run from here. No image is built
//! (no container engine, no registry for the base images): the Containerfile
//! is checked against the repository, the three recipes against each other,
//! and the binary is run with only the capabilities they grant.

#[path = "../../tests/common/mod.rs"]
mod common;

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A tool on PATH, else in `also` (where the machine image installs Go).
/// Missing: a failure under CI, a skip elsewhere.
fn tool(name: &str, also: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    let found = on_path.or_else(|| Some(Path::new(also).join(name)).filter(|p| p.is_file()));
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} not installed (nor in {also})"
        );
        eprintln!("skipped: {name} not installed");
    }
    found
}

/// `cargo metadata` of the workspace (no dependencies: no network).
fn metadata() -> &'static Value {
    static METADATA: OnceLock<Value> = OnceLock::new();
    METADATA.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(repo())
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    })
}

fn package(name: &str) -> &'static Value {
    metadata()["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no package {name}"))
}

/// The one binary the .deb and the image ship: tenge-trace-cli's.
fn bin_name() -> String {
    let targets = package("tenge-trace-cli")["targets"].as_array().unwrap();
    let bins: Vec<_> = targets
        .iter()
        .filter(|t| t["kind"][0] == "bin")
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(bins.len(), 1, "{bins:?}");
    bins[0].clone()
}

// ---- examples/systemd ----

struct Unit {
    exec_start: Vec<String>,
    capabilities: BTreeSet<String>,
}

fn unit() -> Unit {
    let text = read("examples/systemd/tenge-trace-watch.service");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("unit: no {key}="))
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    Unit {
        exec_start: value("ExecStart"),
        capabilities: value("CapabilityBoundingSet").into_iter().collect(),
    }
}

// ---- examples/container/Containerfile ----

struct Instruction {
    keyword: String,
    args: String,
}

struct Stage {
    from: String,
    instructions: Vec<Instruction>,
}

impl Stage {
    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|i| i.keyword == keyword)
            .map(|i| i.args.as_str())
            .collect()
    }

    fn one(&self, keyword: &str) -> &str {
        let all = self.all(keyword);
        assert_eq!(all.len(), 1, "{keyword} in stage {}: {all:?}", self.from);
        all[0]
    }

    /// The exec (JSON) form of ENTRYPOINT or CMD.
    fn exec_form(&self, keyword: &str) -> Vec<String> {
        let args = self.one(keyword);
        serde_json::from_str(args)
            .unwrap_or_else(|e| panic!("{keyword} {args}: not the exec form ({e})"))
    }
}

/// The instructions by stage: comments dropped, continuation lines joined.
fn stages(text: &str) -> Vec<Stage> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    assert!(current.is_empty(), "a continuation runs off the end");
    let mut stages: Vec<Stage> = Vec::new();
    for line in logical.iter().filter(|l| !l.trim().is_empty()) {
        let (keyword, args) = line.trim().split_once(char::is_whitespace).unwrap();
        let (keyword, args) = (keyword.to_ascii_uppercase(), args.trim().to_string());
        if keyword == "FROM" {
            stages.push(Stage {
                from: args,
                instructions: Vec::new(),
            });
        } else {
            let stage = stages.last_mut().expect("an instruction before FROM");
            stage.instructions.push(Instruction { keyword, args });
        }
    }
    stages
}

/// Flags (`--from=build`) and paths of a COPY: (flags, sources, destination).
fn copy_parts(args: &str) -> (Vec<&str>, Vec<&str>, &str) {
    let words: Vec<&str> = args.split_whitespace().collect();
    let (flags, paths): (Vec<&str>, Vec<&str>) = words.iter().partition(|w| w.starts_with("--"));
    let (dest, sources) = paths.split_last().expect("COPY SRC... DEST");
    (flags, sources.to_vec(), dest)
}

/// The `podman run` example in the Containerfile's comments, as words.
fn run_example(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let Some(comment) = line.trim().strip_prefix('#') else {
            continue;
        };
        let comment = comment.trim();
        inside |= comment.starts_with("podman run ");
        if !inside {
            continue;
        }
        let continued = comment.ends_with('\\');
        words.extend(
            comment
                .trim_end_matches('\\')
                .split_whitespace()
                .map(String::from),
        );
        if !continued {
            break;
        }
    }
    assert!(!words.is_empty(), "no `podman run` example");
    words
}

/// A bind mount: host path, read only, host mounts propagate in (rslave /
/// HostToContainer).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Bind {
    host: String,
    read_only: bool,
    propagates: bool,
}

/// The `-v HOST:CONTAINER:OPTIONS` of the run example, by container path.
fn run_binds(words: &[String]) -> BTreeMap<String, Bind> {
    let mut binds = BTreeMap::new();
    for pair in words
        .windows(2)
        .filter(|w| w[0] == "-v" || w[0] == "--volume")
    {
        let parts: Vec<&str> = pair[1].split(':').collect();
        let options: Vec<&str> = parts.get(2).map_or(vec![], |o| o.split(',').collect());
        binds.insert(
            parts[1].to_string(),
            Bind {
                host: parts[0].to_string(),
                read_only: options.contains(&"ro"),
                propagates: options.iter().any(|o| ["rslave", "slave"].contains(o)),
            },
        );
    }
    binds
}

/// Whether `rel` is a path `COPY` brings into the build (or under one).
fn copied(sources: &[&str], rel: &Path) -> bool {
    sources.iter().any(|s| rel.starts_with(s))
}

fn relative_to_repo(path: &Path) -> PathBuf {
    let canonical = path
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    canonical
        .strip_prefix(repo().canonicalize().unwrap())
        .unwrap_or_else(|_| panic!("{} is outside the repository", path.display()))
        .to_path_buf()
}

/// Relative paths a build script names ("../../bpf"), from its package.
fn build_script_paths(script: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(script).unwrap();
    let dir = script.parent().unwrap();
    // The string literals (escaped quotes stay inside them).
    let (mut literals, mut current, mut inside, mut escaped) =
        (vec![], String::new(), false, false);
    for c in text.chars() {
        match (inside, escaped, c) {
            (true, false, '\\') => escaped = true,
            (true, false, '"') => {
                literals.push(std::mem::take(&mut current));
                inside = false;
            }
            (true, _, c) => {
                current.push(c);
                escaped = false;
            }
            (false, _, '"') => inside = true,
            _ => {}
        }
    }
    // Up to the first format placeholder: "../../bpf", not "{BPF}/include".
    literals
        .iter()
        .filter(|s| s.starts_with("../"))
        .map(|s| dir.join(s.split('{').next().unwrap().trim_end_matches('/')))
        .collect()
}

#[test]
fn containerfile_builds_from_what_the_repository_has_and_runs_what_it_built() {
    let text = read("examples/container/Containerfile");
    let stages = stages(&text);
    assert_eq!(stages.len(), 2, "a build stage and a run-time stage");
    let (build, run) = (&stages[0], &stages[1]);

    // Debian 12 both: the binary links the build image's glibc dynamically.
    let rust_version = package("tenge-trace-cli")["rust_version"].as_str().unwrap();
    assert_eq!(
        build.from,
        format!("docker.io/library/rust:{rust_version}-bookworm AS build"),
        "the build image's Rust is the workspace's rust-version"
    );
    assert!(
        run.from.starts_with("docker.io/library/debian:bookworm"),
        "{}",
        run.from
    );

    // What the context brings: every source exists, none is ignored.
    let ignore = read(".containerignore");
    assert_eq!(
        ignore,
        read(".dockerignore"),
        "podman reads one, docker the other"
    );
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for big in ["target", ".git"] {
        assert!(
            ignored.contains(&big),
            "{big} is not kept out of the context"
        );
    }
    let mut sources = Vec::new();
    for args in build.all("COPY") {
        let (flags, from, _) = copy_parts(args);
        assert!(flags.is_empty(), "COPY {args}: from the context only");
        for source in from {
            assert!(
                repo().join(source).exists(),
                "COPY {source}: not in the repository"
            );
            assert!(
                !ignored.iter().any(|i| Path::new(source).starts_with(i)),
                "COPY {source}: the ignore file keeps it out"
            );
            sources.push(source);
        }
    }
    // Enough for the build: every package's manifest and lib, bin and build
    // script sources; what the build scripts read (bpf/); the lock (--locked).
    assert!(sources.contains(&"Cargo.lock"));
    let mut script_reads = 0;
    for p in metadata()["packages"].as_array().unwrap() {
        let manifest = Path::new(p["manifest_path"].as_str().unwrap());
        let rel = relative_to_repo(manifest);
        assert!(copied(&sources, &rel), "{}: not copied", rel.display());
        for target in p["targets"].as_array().unwrap() {
            let kind = target["kind"][0].as_str().unwrap();
            if !["lib", "bin", "custom-build", "proc-macro"].contains(&kind) {
                continue;
            }
            let src = Path::new(target["src_path"].as_str().unwrap());
            let rel = relative_to_repo(src);
            assert!(copied(&sources, &rel), "{}: not copied", rel.display());
            if kind == "custom-build" {
                for read_path in build_script_paths(src) {
                    script_reads += 1;
                    let rel = relative_to_repo(&read_path);
                    assert!(
                        copied(&sources, &rel),
                        "{} reads {}: not copied",
                        src.display(),
                        rel.display()
                    );
                }
            }
        }
        // Path dependencies and [patch] entries outside the members (vendor/).
        let manifest_text = std::fs::read_to_string(manifest).unwrap();
        for line in manifest_text.lines() {
            let Some((_, rest)) = line.split_once("path = \"") else {
                continue;
            };
            let dep = manifest
                .parent()
                .unwrap()
                .join(rest.split('"').next().unwrap());
            // A package directory is there when its manifest is.
            let rel = match dep.is_dir() {
                true => relative_to_repo(&dep).join("Cargo.toml"),
                false => relative_to_repo(&dep),
            };
            assert!(copied(&sources, &rel), "{}: not copied", rel.display());
        }
    }
    assert!(
        script_reads > 0,
        "no build script reads ../../bpf any more?"
    );

    // The build: the release binary of tenge-trace-cli, locked, clang and
    // libbpf's headers for the BPF objects, the revision from a build argument.
    let runs = build.all("RUN").join("\n");
    assert!(
        runs.contains("clang") && runs.contains("libbpf-dev"),
        "{runs}"
    );
    let cargo = runs
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("a cargo build");
    for word in [
        "--release",
        "--locked",
        "-p tenge-trace-cli",
        "TENGE_GIT_REV=",
    ] {
        assert!(cargo.contains(word), "{cargo}: no {word}");
    }
    assert!(build.all("ARG").iter().any(|a| a.starts_with("GIT_REV")));

    // The run-time stage copies that binary to the path ENTRYPOINT runs,
    // which is the unit's and the .deb's.
    let workdir = build.one("WORKDIR");
    let (flags, from, dest) = copy_parts(run.one("COPY"));
    assert_eq!(flags, ["--from=build"]);
    assert_eq!(from, [format!("{workdir}/target/release/{}", bin_name())]);
    let entrypoint = run.exec_form("ENTRYPOINT");
    assert_eq!(entrypoint, [dest]);
    let unit = unit();
    assert_eq!(entrypoint[0], unit.exec_start[0]);
    assert_eq!(entrypoint[0], format!("/usr/bin/{}", bin_name()));

    // CMD: the unit's `watch`, listening on every address (the unit: loopback).
    let cmd = run.exec_form("CMD");
    assert_eq!(cmd, ["watch", "--json", "--prometheus", "0.0.0.0:9433"]);
    assert_eq!(cmd[..3], unit.exec_start[1..4]);
    let port = |addr: &str| addr.parse::<SocketAddr>().unwrap().port();
    assert_eq!(port(&cmd[3]), port(&unit.exec_start[4]));
    assert_eq!(run.one("EXPOSE"), port(&cmd[3]).to_string());
    assert!(
        run.all("USER").is_empty(),
        "root: the capabilities reach root only"
    );

    // The run example: the unit's capabilities and no others, host PID and
    // network namespaces, read-only root, not privileged.
    let words = run_example(&text);
    let added: BTreeSet<String> = words
        .iter()
        .filter_map(|w| w.strip_prefix("--cap-add="))
        .map(|c| format!("CAP_{c}"))
        .collect();
    assert_eq!(added, unit.capabilities);
    for flag in [
        "--cap-drop=ALL",
        "--pid=host",
        "--network=host",
        "--read-only",
    ] {
        assert!(words.iter().any(|w| w == flag), "no {flag}: {words:?}");
    }
    assert!(!words.iter().any(|w| w.starts_with("--privileged")));
    let binds = run_binds(&words);
    assert_eq!(
        binds.keys().collect::<Vec<_>>(),
        ["/run/netns", "/sys/kernel/btf", "/sys/kernel/tracing"]
    );
    assert!(binds.values().all(|b| b.read_only), "{binds:?}");
    assert!(binds["/run/netns"].propagates, "{binds:?}");
}

/// What the image needs at run time is in debian:bookworm-slim: glibc
/// (libc6) and libgcc_s (libgcc-s1), both Priority: required.
#[test]
fn binary_needs_only_what_the_slim_image_has() {
    let bin = env!("CARGO_BIN_EXE_tenge-trace");
    let out = Command::new("ldd").arg(bin).output().expect("ldd runs");
    assert!(out.status.success());
    let in_slim = [
        "linux-vdso.so.1",
        "libgcc_s.so.1",
        "libm.so.6",
        "libc.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "/lib64/ld-linux-x86-64.so.2",
    ];
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(needed.contains(&"libc.so.6"), "{text}");
    for lib in &needed {
        assert!(
            in_slim.contains(lib),
            "{lib}: not in debian:bookworm-slim\n{text}"
        );
    }
}

// ---- examples/kubernetes/daemonset.yaml ----

/// The DaemonSet's container and pod spec.
fn daemonset() -> serde_yaml::Value {
    let text = read("examples/kubernetes/daemonset.yaml");
    let documents: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).unwrap())
        .collect();
    let kinds: Vec<&str> = documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["Namespace", "DaemonSet"]);
    documents[1].clone()
}

fn strings(v: &serde_yaml::Value) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn daemonset_agrees_with_the_container_and_the_unit() {
    let ds = daemonset();
    let pod = &ds["spec"]["template"]["spec"];
    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let text = read("examples/container/Containerfile");
    let stages = stages(&text);
    let run = stages.last().unwrap();

    // The image's ENTRYPOINT runs with the image's CMD as arguments.
    assert!(
        c.get("command").is_none(),
        "command replaces the ENTRYPOINT"
    );
    assert_eq!(strings(&c["args"]), run.exec_form("CMD"));
    let ports = c["ports"].as_sequence().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(
        ports[0]["containerPort"].as_u64().unwrap().to_string(),
        run.one("EXPOSE")
    );
    // The image is tagged with the version it ships.
    let image = c["image"].as_str().unwrap();
    let version = package("tenge-trace-cli")["version"].as_str().unwrap();
    assert!(image.ends_with(&format!(":{version}")), "{image}");

    // The unit's capabilities, the run example's.
    let caps = &c["securityContext"]["capabilities"];
    let added: BTreeSet<String> = strings(&caps["add"])
        .into_iter()
        .map(|c| format!("CAP_{c}"))
        .collect();
    assert_eq!(added, unit().capabilities);
    assert_eq!(strings(&caps["drop"]), ["ALL"]);

    // The run example's bind mounts.
    let volumes: BTreeMap<&str, &serde_yaml::Value> = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    let mounts: BTreeMap<String, Bind> = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| {
            let volume = volumes[m["name"].as_str().unwrap()];
            let bind = Bind {
                host: volume["hostPath"]["path"].as_str().unwrap().to_string(),
                read_only: m["readOnly"].as_bool() == Some(true),
                propagates: m["mountPropagation"].as_str() == Some("HostToContainer"),
            };
            (m["mountPath"].as_str().unwrap().to_string(), bind)
        })
        .collect();
    assert_eq!(mounts, run_binds(&run_example(&text)));
}

/// examples/kubernetes/validate: `go test` decodes the manifest strictly
/// into the API types and checks what watch needs; gofmt and go vet.
#[test]
fn daemonset_passes_the_strict_kubernetes_validation() {
    let Some(go) = tool("go", "/usr/local/go/bin") else {
        return;
    };
    let dir = repo().join("examples/kubernetes/validate");
    let go_run = |args: &[&str]| {
        let mut command = Command::new(&go);
        command.args(args).current_dir(&dir);
        // go.sum is complete: nothing may change it. No toolchain download.
        let flags = std::env::var("GOFLAGS").unwrap_or_default();
        command
            .env("GOFLAGS", format!("{flags} -mod=readonly").trim())
            .env("GOTOOLCHAIN", "local");
        // The module and build caches live under $HOME unless told otherwise.
        if std::env::var_os("HOME").is_none() {
            let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
            if std::env::var_os("GOPATH").is_none() {
                command.env("GOPATH", tmp.join("go"));
            }
            if std::env::var_os("GOCACHE").is_none() {
                command.env("GOCACHE", tmp.join("go-build"));
            }
        }
        let out = command.output().expect("go runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("go {}:\n{text}", args.join(" "));
        assert!(out.status.success(), "go {}:\n{text}", args.join(" "));
        text
    };
    let gofmt = go.with_file_name("gofmt");
    let unformatted = Command::new(&gofmt)
        .args(["-l", "."])
        .current_dir(&dir)
        .output()
        .expect("gofmt runs");
    assert!(unformatted.status.success());
    assert!(
        unformatted.stdout.is_empty(),
        "not gofmt'd: {}",
        String::from_utf8_lossy(&unformatted.stdout)
    );
    go_run(&["vet", "./..."]);
    // -count=1: go test's cache does not see files outside the module
    // change (../daemonset.yaml), and would pass a broken manifest.
    let text = go_run(&["test", "-count=1", "./..."]);
    assert!(
        text.contains("ok  \ttenge-trace/examples/kubernetes/validate"),
        "{text}"
    );
}

/// The .deb carries the recipes as examples (not the Go test module).
#[test]
fn deb_ships_the_recipes() {
    let assets = package("tenge-trace-cli")["metadata"]["deb"]["assets"]
        .as_array()
        .unwrap();
    let assets: Vec<(&str, &str)> = assets
        .iter()
        .map(|a| (a[0].as_str().unwrap(), a[1].as_str().unwrap()))
        .collect();
    let doc = "usr/share/doc/tenge-trace/examples/";
    for (file, dir) in [
        ("examples/container/Containerfile", "container/"),
        ("examples/kubernetes/daemonset.yaml", "kubernetes/"),
    ] {
        assert!(
            assets.contains(&(&format!("../{file}"), &format!("{doc}{dir}"))),
            "{file} not in the .deb: {assets:?}"
        );
    }
    for (source, _) in &assets {
        assert!(
            !source.contains("validate"),
            "{source}: a test, not an example"
        );
        // Sources in the repository (not build output) exist.
        let Some(rel) = source.strip_prefix("../") else {
            continue;
        };
        if rel.starts_with("target/") {
            continue;
        }
        let path = repo().join(rel);
        let (dir, name) = (path.parent().unwrap(), path.file_name().unwrap());
        let name = name.to_string_lossy();
        let matches = std::fs::read_dir(dir).unwrap().any(|e| {
            let file = e.unwrap().file_name().to_string_lossy().into_owned();
            match name.split_once('*') {
                Some((head, tail)) => file.starts_with(head) && file.ends_with(tail),
                None => file == name,
            }
        });
        assert!(matches, "{source}: no such file");
    }
}

// ---- the binary under the recipes' capabilities ----

/// Capability numbers (linux/capability.h) of the names the unit uses.
fn cap_bit(name: &str) -> u32 {
    match name {
        "CAP_NET_ADMIN" => 12,
        "CAP_SYS_ADMIN" => 21,
        "CAP_SYS_RESOURCE" => 24,
        "CAP_SYSLOG" => 34,
        "CAP_PERFMON" => 38,
        "CAP_BPF" => 39,
        other => panic!("{other}: add its number"),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

fn http_status(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response))
}

/// The image's CMD, listening on a free loopback port, with only `caps` in
/// the bounding set (as the unit's CapabilityBoundingSet and the
/// containers' cap-drop ALL + cap-add leave a root process).
fn watch_with(caps: &BTreeSet<String>, addr: SocketAddr) -> std::process::Child {
    let stages = stages(&read("examples/container/Containerfile"));
    let mut cmd = stages.last().unwrap().exec_form("CMD");
    let listen = cmd.last_mut().unwrap();
    assert!(listen.ends_with(":9433"));
    *listen = addr.to_string();
    let bounding: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let bounding = ["-all".to_string()]
        .into_iter()
        .chain(bounding)
        .collect::<Vec<_>>();
    Command::new("setpriv")
        .arg(format!("--bounding-set={}", bounding.join(",")))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_tenge-trace"))
        .args(&cmd)
        .args(["--duration", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv runs")
}

fn output_of(child: std::process::Child) -> (std::process::ExitStatus, String, String) {
    let out = child.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status, text(&out.stdout), text(&out.stderr))
}

#[test]
fn watch_serves_metrics_with_only_the_recipes_capabilities() {
    if !common::require_root("watch_serves_metrics_with_only_the_recipes_capabilities") {
        return;
    }
    if tool("setpriv", "/usr/bin").is_none() {
        return;
    }
    let caps = unit().capabilities;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let mut child = watch_with(&caps, addr);
    let pid = child.id();

    // Readiness: /metrics answers once the probes are attached.
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        if let Some(status) = child.try_wait().unwrap() {
            let (_, out, err) = output_of(child);
            panic!("watch exited: {status}\n{out}\n{err}");
        }
        if let Some((200, body)) = http_status(addr, "/metrics") {
            break body;
        }
        assert!(Instant::now() < deadline, "no /metrics on {addr}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(metrics.contains("tenge_trace_build_info"), "{metrics}");
    // Liveness: `/`.
    assert_eq!(http_status(addr, "/").map(|(s, _)| s), Some(200));

    // Nothing beyond the recipes' capabilities is effective.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    let allowed: u64 = caps.iter().map(|c| 1u64 << cap_bit(c)).sum();
    assert_eq!(effective & !allowed, 0, "CapEff {effective:x}");
    assert_ne!(
        effective & (1 << cap_bit("CAP_BPF")),
        0,
        "CapEff {effective:x}"
    );

    // Kernel addresses readable (CAP_SYSLOG): /proc/kallsyms gives the
    // direct map's bases and kernel frames, not zeros.
    let first = Command::new("setpriv")
        .arg(format!(
            "--bounding-set=-all,{}",
            caps.iter()
                .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
                .collect::<Vec<_>>()
                .join(",")
        ))
        .args(["--", "head", "-1", "/proc/kallsyms"])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&first.stdout);
    assert!(
        line.split_whitespace()
            .next()
            .is_some_and(|a| a.chars().any(|c| c != '0')),
        "kallsyms addresses hidden under the recipes' capabilities: {line:?}"
    );

    // SIGTERM, as the container runtime sends: a clean exit with the summary.
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let (status, out, err) = output_of(child);
    assert!(status.success(), "{status}\n{err}");
    assert!(
        out.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["type"] == "summary"),
        "no summary: {out}\n{err}"
    );

    // And the bounding set does bind: without the capabilities, no BPF.
    let none = watch_with(&BTreeSet::new(), addr);
    let (status, _, err) = output_of(none);
    assert!(!status.success(), "watch ran without capabilities: {err}");
    assert!(err.contains("Operation not permitted"), "{err}");
}
