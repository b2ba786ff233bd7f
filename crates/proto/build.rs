//! Generates the gRPC code from `proto/`. protoc comes from the `protoc-bin-vendored` crate,
//! so a fresh machine needs nothing installed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Build scripts are single-threaded, so setting the variable here races with nothing.
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure().compile_protos(&["proto/tenure/v1/tenure.proto"], &["proto"])?;
    Ok(())
}
