//! One module per subcommand.

pub mod accuracy;
pub mod bench;
pub mod claims;
pub mod cluster;
pub mod compare;
pub mod compress;
pub mod crosscheck;
pub mod metrics;
pub mod plan;
pub mod reproduce;
pub mod run;
pub mod tune;
pub mod zoo;
