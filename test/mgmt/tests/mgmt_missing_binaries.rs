//! Without the Go-built binaries the plane does not start, and the failure says what to run (tests that
//! need the plane fail with this message instead of passing silently).

use std::process::Command;

#[test]
fn up_without_binaries_fails_and_names_the_build_target() -> anyhow::Result<()> {
    let empty = tempfile::tempdir()?;
    let out = Command::new("bash")
        .arg(capkk_mgmt::script_path())
        .arg("up")
        .env("CAPKK_CACHE", empty.path())
        .env("CAPKK_MGMT_DIR", empty.path().join("mgmt"))
        .env_remove("KUBEBUILDER_ASSETS")
        .env_remove("CAPKK_MGMT_AUTOBUILD")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "up must fail without binaries; stderr: {stderr}"
    );
    assert!(stderr.contains("management plane binaries missing"), "{stderr}");
    assert!(stderr.contains("make mgmt-bin"), "{stderr}");
    assert!(
        stderr.contains("cluster-api-controller"),
        "names the missing binaries: {stderr}"
    );
    assert!(
        !empty.path().join("mgmt").exists(),
        "nothing was started or written"
    );
    Ok(())
}
