{
  description = "dlas: across-stack deep-learning inference benchmarks, reproducible";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    rust-overlay = {
      url = "github:oxalica/rust-overlay";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    crane.url = "github:ipetkov/crane";
  };

  outputs = { self, nixpkgs, rust-overlay, crane }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system:
        let
          pkgs = import nixpkgs {
            inherit system;
            overlays = [ rust-overlay.overlays.default ];
          };
          # The exact toolchain that rust-toolchain.toml pins (rustfmt and clippy included).
          toolchain = pkgs.rust-bin.fromRustupToolchainFile ./rust-toolchain.toml;
          craneLib = (crane.mkLib pkgs).overrideToolchain toolchain;
          # CPU-only ONNX Runtime; `ort` loads it at run time (load-dynamic).
          onnxruntime = pkgs.onnxruntime.override { openvinoSupport = false; };
        in f { inherit pkgs toolchain craneLib onnxruntime; });
    in {
      devShells = forAll ({ pkgs, toolchain, onnxruntime, ... }: {
        default = pkgs.mkShell {
          packages = [
            toolchain
            pkgs.cargo-nextest
            pkgs.cargo-insta
            pkgs.python3
            pkgs.dejavu_fonts
            # The test that opens figures/index.html in a headless browser.
            pkgs.chromium
            onnxruntime
          ];
          # The same variable `cargo xtask setup` fills from the pinned PyPI wheel.
          ORT_DYLIB_PATH = "${onnxruntime}/lib/libonnxruntime.so";
        };
      });

      packages = forAll ({ craneLib, ... }: {
        default = craneLib.buildPackage {
          src = craneLib.cleanCargoSource ./.;
          pname = "dlas";
          cargoExtraArgs = "--package dlas-cli";
          doCheck = false;
        };
      });
    };
}
