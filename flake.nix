{
  description = "nightly-e2e: the nightly GPU e2e suites of LLM training frameworks, on Dagster and Kubernetes";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.11";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      # Python dependencies come from requirements.lock (pinned); Nix provides the toolchain and
      # the system programs the pipeline and its tests call.
      tools = pkgs: with pkgs; [ python311 uv gnumake git kubectl kustomize postgresql_15 chromium ];
      script = pkgs: name: target: pkgs.writeShellApplication {
        inherit name;
        runtimeInputs = tools pkgs;
        text = ''
          cd "''${NIGHTLY_PROJECT:-$PWD}"
          exec make ${target} PY=${pkgs.python311}/bin/python3
        '';
      };
    in
    {
      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = tools pkgs;
          shellHook = ''
            export NIGHTLY_HOME="$PWD/.nightly"
            echo "nightly-e2e: 'make nightly' runs a night of examples/minirl, 'make test' the tests, 'make ui' the Dagster UI"
          '';
        };
      });

      apps = forAllSystems (pkgs: {
        nightly = { type = "app"; program = "${script pkgs "nightly" "nightly"}/bin/nightly"; };
        test = { type = "app"; program = "${script pkgs "nightly-test" "test"}/bin/nightly-test"; };
        ui = { type = "app"; program = "${script pkgs "nightly-ui" "ui"}/bin/nightly-ui"; };
        default = self.apps.${pkgs.system}.nightly;
      });

      # The declarative inputs, for tools that want them without reading the tree.
      specs = {
        repos = ./assets/repos.yaml;
        cluster = ./assets/cluster.yaml;
        models = ./assets/models.yaml;
        datasets = ./assets/datasets.yaml;
        checkpoints = ./assets/checkpoints.yaml;
        kustomize = ./k8s;
      };
    };
}
