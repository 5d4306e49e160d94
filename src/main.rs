//! The `easel` binary: the allocator, then the command line (`easel::cli`).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    easel::cli::main()
}
