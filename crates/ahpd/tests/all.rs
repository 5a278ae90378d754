//! The daemon's integration tests: the real `ahpd` binary on loopback, with its configuration in
//! a temporary folder.

mod suite;
