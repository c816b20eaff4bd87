//! Start-up: binds the listener, starts the worker, watches signals and
//! serves until the process is stopped.

use crate::agent::AgentHandle;
use crate::config::resolve::ServerSettings;
use crate::frontend::serve::access::Access;
use crate::frontend::serve::agent_api::AgentApi;
use crate::frontend::signals;

use super::jobs::CliServer;
use super::CliServerConfig;

/// Serves until the process is stopped. Returns the exit code.
pub fn run(
    server: &ServerSettings,
    access: &Access,
    agent: AgentHandle,
    config: CliServerConfig,
    api: Option<AgentApi>,
) -> i32 {
    let listener = match access.bind(server) {
        Ok(listener) => listener,
        Err(code) => return code,
    };
    let cli = match CliServer::start(agent, config, api) {
        Ok(cli) => cli,
        Err(error) => {
            eprintln!("shepherd: cannot start the cliserver worker: {error}");
            return 1;
        }
    };
    let (busy, cancel) = (cli.clone(), cli.clone());
    signals::watch(signals::Watch::server(
        Box::new(move || busy.busy()),
        Box::new(move || {
            cancel.cancel_running();
        }),
    ));
    match listener.local_addr() {
        Ok(addr) => access.announce(addr, &format!("cliserver listening on {}", listener.urls())),
        Err(error) => eprintln!("shepherd: cliserver listening (address unknown: {error})"),
    }
    listener.run(cli);
    0
}
