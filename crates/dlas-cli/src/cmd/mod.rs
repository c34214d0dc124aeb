//! One module per subcommand.

pub mod compress;
pub mod plan;
pub mod reproduce;
pub mod run;
pub mod zoo;
