//! How host work failed: transient (retried with backoff) or terminal (stays until the retry annotation).

use capkk_api::consts::reasons;
use capkk_executor::ExecError;

use crate::services::Phase;

/// How host work ended.
pub(crate) enum Failure {
    /// Retry later without anyone changing anything.
    Transient(String),
    /// Stays until the spec changes or the retry annotation is set.
    Terminal {
        /// The condition reason, one of `capkk_api::consts::reasons`.
        reason: &'static str,
        /// What failed, for the condition and the event.
        message: String,
    },
}

/// Map a transport error: a host-key mismatch or rejected credentials are terminal, the rest transient.
pub(crate) fn exec_failure(e: &ExecError) -> Failure {
    match e {
        ExecError::HostKeyMismatch { .. } => Failure::Terminal {
            reason: reasons::HOST_KEY_MISMATCH,
            message: e.to_string(),
        },
        ExecError::Auth { .. } | ExecError::Sudo { .. } => Failure::Terminal {
            reason: reasons::AUTH_FAILED,
            message: e.to_string(),
        },
        ExecError::Credentials { .. } => Failure::Terminal {
            reason: reasons::CREDENTIALS_UNAVAILABLE,
            message: e.to_string(),
        },
        ExecError::AddressRefused { .. } => Failure::Terminal {
            reason: reasons::ADDRESS_REFUSED,
            message: crate::hosts::address_refused(e, "spec.address", "spec.bastion.address")
                .unwrap_or_else(|| e.to_string()),
        },
        _ => Failure::Transient(e.to_string()),
    }
}

/// Map a phase's error: a failed command, an unsupported option or invalid input are terminal.
pub(crate) fn service_failure(phase: Phase, e: capkk_service::Error) -> Failure {
    use capkk_service::Error as S;
    let p = phase.name();
    match e {
        S::Exec { source, step } => match exec_failure(&source) {
            Failure::Transient(m) => Failure::Transient(format!("{p}: step {step}: {m}")),
            Failure::Terminal { reason, message } => Failure::Terminal {
                reason,
                message: format!("{p}: {message}"),
            },
        },
        S::CommandFailed {
            step,
            command,
            exit_code,
            output_tail,
        } => Failure::Terminal {
            reason: reasons::COMMAND_FAILED,
            message: format!(
                "{p}: step {step:?}: command `{command}` exited with {}; output tail:\n{output_tail}",
                exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "no status".into())
            ),
        },
        S::Unsupported { what } => Failure::Terminal {
            reason: reasons::UNSUPPORTED,
            message: format!("{p}: unsupported: {what}"),
        },
        S::InvalidInput { field, message } => Failure::Terminal {
            reason: reasons::INVALID_SPEC,
            message: format!("{p}: invalid {field}: {message}"),
        },
        e @ S::DownloadRefused { .. } => Failure::Terminal {
            reason: reasons::DOWNLOAD_REFUSED,
            message: format!("{p}: {e}"),
        },
        e if e.is_transient() => Failure::Transient(format!("{p}: {e}")),
        e => Failure::Terminal {
            reason: reasons::COMMAND_FAILED,
            message: format!("{p}: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terminal_reason(f: Failure) -> Option<&'static str> {
        match f {
            Failure::Terminal { reason, .. } => Some(reason),
            Failure::Transient(_) => None,
        }
    }

    #[test]
    fn a_failed_command_is_terminal_and_names_the_command_and_exit_code() {
        let f = service_failure(
            Phase::Provisioning,
            capkk_service::Error::CommandFailed {
                step: "runcmd[0]".into(),
                command: "exit 3".into(),
                exit_code: Some(3),
                output_tail: "boom".into(),
            },
        );
        match f {
            Failure::Terminal { reason, message } => {
                assert_eq!(reason, reasons::COMMAND_FAILED);
                assert!(message.contains("provisioning") && message.contains("exited with 3"));
                assert!(message.contains("boom"));
            }
            Failure::Transient(m) => panic!("transient: {m}"),
        }
    }

    #[test]
    fn a_step_that_says_retry_later_is_transient_and_keeps_its_output() {
        let f = service_failure(
            Phase::Binary,
            capkk_service::Error::RetryLater {
                step: "binary/download-artifacts".into(),
                output_tail: "curl: (23) Failure writing output to destination".into(),
            },
        );
        match f {
            Failure::Transient(m) => {
                assert!(
                    m.contains("binary") && m.contains("Failure writing output"),
                    "{m}"
                )
            }
            Failure::Terminal { reason, message } => panic!("terminal {reason}: {message}"),
        }
    }

    #[test]
    fn unsupported_and_invalid_input_are_terminal() {
        let u = service_failure(
            Phase::Repository,
            capkk_service::Error::Unsupported {
                what: "pacman".into(),
            },
        );
        assert_eq!(terminal_reason(u), Some(reasons::UNSUPPORTED));
        let i = service_failure(
            Phase::Binary,
            capkk_service::Error::InvalidInput {
                field: "spec.component".into(),
                message: "bad".into(),
            },
        );
        assert_eq!(terminal_reason(i), Some(reasons::INVALID_SPEC));
    }

    #[test]
    fn a_refused_dial_is_terminal_and_names_the_field_and_the_flag_but_no_port() {
        use capkk_executor::address::{Cidr, Refusal};
        let refused = |address: &str, bastion: bool, refusal: Refusal| ExecError::AddressRefused {
            address: address.into(),
            bastion,
            resolved: false,
            refusal,
        };
        let cidr: Cidr = "10.96.0.0/12".parse().unwrap();
        for (e, want) in [
            (
                refused("127.0.0.1", false, Refusal::Loopback),
                "spec.address: 127.0.0.1 is a loopback address (allowed only by --ssh-allow-cidr); \
                 refused before dialling",
            ),
            (
                refused("10.96.0.10", true, Refusal::Denied(cidr)),
                "spec.bastion.address: 10.96.0.10 is an address in 10.96.0.0/12, one of the cluster's own \
                 ranges (--ssh-deny-cidr; --ssh-allow-cidr makes exceptions); refused before dialling",
            ),
            (
                refused("169.254.169.254", false, Refusal::LinkLocal),
                "spec.address: 169.254.169.254 is a link-local address (where cloud metadata services \
                 answer); refused before dialling",
            ),
        ] {
            match exec_failure(&e) {
                Failure::Terminal { reason, message } => {
                    assert_eq!(reason, reasons::ADDRESS_REFUSED);
                    assert_eq!(message, want);
                }
                Failure::Transient(m) => panic!("transient: {m}"),
            }
        }
    }

    #[test]
    fn a_refused_download_is_terminal_and_names_the_field_and_why() {
        let f = service_failure(
            Phase::Binary,
            capkk_service::Error::DownloadRefused {
                field: "spec.component.overrides[id=kubeadm].url".into(),
                url: "http://metadata.internal/latest".into(),
                reason: "metadata.internal resolves to a link-local address (where cloud metadata services \
                         answer)"
                    .into(),
            },
        );
        match f {
            Failure::Terminal { reason, message } => {
                assert_eq!(reason, reasons::DOWNLOAD_REFUSED);
                assert_eq!(
                    message,
                    "binary: download from http://metadata.internal/latest \
                     (spec.component.overrides[id=kubeadm].url) refused: metadata.internal resolves to a \
                     link-local address (where cloud metadata services answer)"
                );
            }
            Failure::Transient(m) => panic!("transient: {m}"),
        }
    }
}
