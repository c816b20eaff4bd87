//! Front-ends (in progress).

pub fn run_main() -> i32 {
    0
}
