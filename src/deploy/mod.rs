//! What running easel as an installed service needs besides serving: a consistent backup of the
//! embedded default and putting one back (`backup`), a health check that container runtimes can
//! run without shell tools (`health`), and telling a service manager when easel is ready
//! (`notify`).

pub mod backup;
pub mod health;
pub mod notify;
