// Builds the one C file of the server: Redis's long-double INCRBYFLOAT (see src/ldouble.c).
fn main() {
    println!("cargo:rerun-if-changed=src/ldouble.c");
    cc::Build::new()
        .file("src/ldouble.c")
        .opt_level(2)
        .compile("ringlet_ldouble");
}
