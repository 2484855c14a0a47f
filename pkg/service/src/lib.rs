//! Host services (bootstrap, repository, binary, containermanager, provisioning) over the executor trait.
