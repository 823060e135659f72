# The parts of the checkout a build reads, so that .venv/, .nightly/, caches and the Nix files
# themselves never enter the store (and editing them rebuilds nothing).
{ root }:
let
  pick =
    name: tops:
    builtins.path {
      inherit name;
      path = root;
      filter =
        path: type:
        let
          rel = builtins.substring (builtins.stringLength (toString root) + 1) (-1) (toString path);
          top = builtins.head (builtins.split "/" rel);
          base = baseNameOf path;
        in
        builtins.elem top tops && base != "__pycache__" && base != ".pytest_cache" && base != ".nightly";
    };
  tops = {
    # What the Python package build needs: pyproject.toml names README.md as its readme.
    app = [
      "pyproject.toml"
      "README.md"
      "pipelines"
      "assets"
      "examples"
      "workspace.yaml"
    ];
    # What lint and the unit tests read (checks.unit copies it): every top-level path a test outside
    # tests/nix opens through the project root (tests/nix/test_source_tree.py checks it).
    tree = [
      "pyproject.toml"
      "README.md"
      "requirements.lock"
      "build-constraints.lock"
      "Dockerfile"
      "workspace.yaml"
      "Makefile"
      "pipelines"
      "tests"
      "bench"
      "examples"
      "assets"
      "k8s"
      "docs"
      "scripts"
    ];
  };
in
{
  inherit tops;
  app = pick "nightly-e2e-app-source" tops.app;
  tree = pick "nightly-e2e-source" tops.tree;
}
