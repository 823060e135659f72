{
  description = "nightly-e2e: the nightly GPU e2e suites of LLM training frameworks, on Dagster and Kubernetes";

  # A supported NixOS release branch; flake.lock pins the exact revision. tests/nix evaluates
  # this flake offline against nix/standin, whose attribute names come from that release.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-26.05";

  outputs =
    { self, nixpkgs }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f (build nixpkgs.legacyPackages.${system}));
      build = pkgs: import ./nix/build.nix { inherit pkgs; root = ./.; };
      app = program: description: {
        type = "app";
        inherit program;
        meta.description = description;
      };
    in
    {
      # nix build: the application (python with pipelines, bin/dagster), its bin/nightly keeping
      # state in $NIGHTLY_HOME, by default ./.nightly (the store is read-only).
      packages = forAllSystems (b: {
        inherit (b) default;
        inherit (b) nightly-e2e;
      });

      # nix run / nix run .#ui
      apps = forAllSystems (b: {
        default = app "${b.nightly}/bin/nightly" "the nightly CLI (nightly run: one night of examples/minirl)";
        ui = app "${b.nightly-ui}/bin/nightly-ui" "the Dagster UI on the project's instance";
      });

      # nix build .#images.code-location / .#images.test-pod.<framework>
      legacyPackages = forAllSystems (b: {
        inherit (b) images;
      });

      devShells = forAllSystems (b: {
        default = b.shell;
      });

      checks = forAllSystems (b: b.checks);

      formatter = nixpkgs.lib.genAttrs systems (system: nixpkgs.legacyPackages.${system}.nixfmt);

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
