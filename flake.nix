# Development shell for Nix users: `nix develop`.
#
# Gives the Rust toolchain (from nixpkgs), a C compiler (the C API tests and mimalloc's sources),
# Python with matplotlib and pandas (plot/), and the simulators for the mCAS RTL (fpga/).
# Without Nix, script/test.sh and script/run.sh install what they need on Debian.
{
  description = "cxlalloc: a crash-tolerant allocator for processes sharing CXL memory or /dev/shm";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = [
            pkgs.rustc
            pkgs.cargo
            pkgs.clippy
            pkgs.rustfmt
            pkgs.gcc
            pkgs.pkg-config
            (pkgs.python3.withPackages (ps: [ ps.matplotlib ps.pandas ps.pymemcache ]))
            # cxlkv's tests and load comparison: memcached and its client tools.
            pkgs.memcached
            pkgs.libmemcached
            pkgs.iverilog
            pkgs.verilator
            # script/fpga.sh formal and synth: Yosys (with yosys-smtbmc and ABC), Z3, nextpnr.
            pkgs.yosys
            pkgs.z3
            pkgs.nextpnr
          ];
          # rust-analyzer and friends find the standard library sources here.
          RUST_SRC_PATH = "${pkgs.rustPlatform.rustLibSrc}";
        };
      });

      formatter = forAllSystems (pkgs: pkgs.nixpkgs-fmt);
    };
}
