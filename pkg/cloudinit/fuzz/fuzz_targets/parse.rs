//! Fuzz the bootstrap-data parser: no input may panic, hang or exhaust memory.
//!
//! The first byte picks how the rest is framed, so the fuzzer reaches the YAML walker and the Jinja
//! renderer quickly instead of spending its time discovering the `#cloud-config` header.
#![no_main]

use capkk_cloudinit::{TemplateVars, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let vars = TemplateVars::new().local_hostname("node-1").instance_id("i-1").provider_id("kk://ns/n");
    let Some((&mode, rest)) = data.split_first() else { return };
    let payload = match mode % 4 {
        0 => rest.to_vec(),
        1 => [b"#cloud-config\n".as_slice(), rest].concat(),
        2 => [b"## template: jinja\n#cloud-config\n".as_slice(), rest].concat(),
        _ => [b"#cloud-config\nwrite_files:\n- path: /f\n  encoding: gz+b64\n  content: ".as_slice(), rest].concat(),
    };
    if let Ok(plan) = parse(&payload, "cloud-config", &vars) {
        // Names and ids must be computable for every step of every accepted plan.
        for step in &plan.steps {
            let _ = (step.name(), step.id.len());
        }
    }
});
