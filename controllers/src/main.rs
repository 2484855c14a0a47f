//! The capkk-rs manager.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    capkk_controllers::manager::run(capkk_controllers::manager::Args::parse()).await
}
