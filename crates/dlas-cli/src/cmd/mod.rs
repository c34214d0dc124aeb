//! One module per subcommand.

pub mod plan;
pub mod reproduce;
pub mod run;
pub mod zoo;
