//! The crate's error type. Variants are named after the action that failed.

/// Result alias.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a reconcile (or a step of one) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was attempted, e.g. `get Cluster ns/name`.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing a finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The spec is invalid; `field` names what to fix.
    #[error("invalid {field}: {message}")]
    InvalidSpec {
        /// The offending field path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A field names another object with a value that is no object name (a DNS-1123 subdomain): it would change
    /// the path of the request that reads the object, so no request was made (crate::object_name).
    #[error("invalid {field}: {name:?} is not an object name (a DNS-1123 subdomain)")]
    InvalidName {
        /// The field the name was read from, e.g. `KKMachine.spec.instanceID`.
        field: String,
        /// The refused value (cut when long).
        name: String,
    },
    /// SSH credentials could not be resolved (Secret missing, key absent).
    #[error("resolving credentials: {0}")]
    ResolveCredentials(String),
    /// Talking to the workload cluster failed.
    #[error("workload cluster {cluster}: {message}")]
    WorkloadCluster {
        /// Cluster name.
        cluster: String,
        /// Why.
        message: String,
    },
    /// Deletion cleanup is not finished yet (the finalizer must stay): not a failure, the reconcile is
    /// retried after `retry`. kube-runtime's finalizer helper removes the finalizer whenever cleanup returns
    /// `Ok`, so unfinished cleanup is reported through this variant.
    #[error("cleanup in progress: {what}")]
    CleanupPending {
        /// What is awaited.
        what: String,
        /// Retry after.
        retry: std::time::Duration,
    },
}

impl Error {
    /// A closure wrapping a kube error with the action that failed.
    pub(crate) fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let action = action.into();
        move |source| Error::Kube { action, source }
    }

    /// True when the API reported a 409 Conflict (optimistic concurrency).
    pub(crate) fn is_conflict(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Kube {
                source: kube::Error::Api(s),
                ..
            } => s.code == 409,
            // The finalizer helper's JSON patch carries a `test` op: a concurrent change fails it with 422.
            Error::Finalizer(f) => matches!(
                &**f,
                F::AddFinalizer(kube::Error::Api(s)) | F::RemoveFinalizer(kube::Error::Api(s))
                    if s.code == 409 || s.code == 422
            ),
            _ => false,
        }
    }

    /// Unfinished deletion cleanup: keep the finalizer and retry after `retry`.
    pub(crate) fn pending(what: impl Into<String>, retry: std::time::Duration) -> Error {
        Error::CleanupPending {
            what: what.into(),
            retry,
        }
    }

    /// A short machine-readable label for metrics.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::InvalidSpec { .. } => "invalid_spec",
            Error::InvalidName { .. } => "invalid_name",
            Error::ResolveCredentials(_) => "credentials",
            Error::WorkloadCluster { .. } => "workload",
            Error::CleanupPending { .. } => "cleanup_pending",
        }
    }
}

impl From<kube::runtime::finalizer::Error<Error>> for Error {
    fn from(e: kube::runtime::finalizer::Error<Error>) -> Self {
        match e {
            kube::runtime::finalizer::Error::ApplyFailed(e)
            | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
            other => Error::Finalizer(Box::new(other)),
        }
    }
}

/// True when a kube error is 404.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// True when a kube error is 409 AlreadyExists/Conflict.
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}
