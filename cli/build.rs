//! Stamps the git revision into `--version`: TENGE_GIT_REV when set (a
//! container build has no checkout: examples/container/Containerfile passes
//! it as a build argument), else `git rev-parse`.
fn main() {
    println!("cargo:rerun-if-env-changed=TENGE_GIT_REV");
    let rev = std::env::var("TENGE_GIT_REV")
        .ok()
        .filter(|rev| !rev.trim().is_empty())
        .or_else(|| {
            std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        })
        .map(|rev| rev.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TENGE_GIT_REV={rev}");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs");
}
