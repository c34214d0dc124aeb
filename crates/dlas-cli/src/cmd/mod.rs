//! One module per subcommand.

pub mod accuracy;
pub mod compress;
pub mod plan;
pub mod reproduce;
pub mod run;
pub mod zoo;
