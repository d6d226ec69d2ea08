//! Links the addon against the symbols Node provides at load time.

fn main() {
    napi_build::setup();
}
