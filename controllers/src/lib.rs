//! KKCluster, KKMachine and KKInstance reconcilers.
