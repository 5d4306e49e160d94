//! What running easel as an installed service needs besides serving: a consistent backup of the
//! embedded default and putting one back (`backup`), a health check that container runtimes can
//! run without shell tools (`health`), telling a service manager when easel is ready
//! (`notify`), and reading the settings again while it runs (`reload`).

pub mod backup;
pub mod health;
pub mod notify;
pub mod reload;
