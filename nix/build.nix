# Everything the flake builds for one system: the application, its commands, the dev shell,
# the OCI images and the checks. flake.nix only maps these onto the flake's outputs.
{ pkgs, root }:
let
  inherit (pkgs) lib;
  python = pkgs.python311;
  lock = lib.importJSON ./python-lock.json;
  source = import ./source.nix { inherit root; };
  project = (builtins.fromTOML (builtins.readFile (root + "/pyproject.toml"))).project;
  wheels = import ./wheels.nix { inherit pkgs python lock; };
  inGroup = group: lib.attrValues (lib.filterAttrs (name: _: lock.packages.${name}.group == group) wheels);

  # The package built from pyproject.toml (setuptools) on top of the pinned runtime wheels.
  # pipelines/ finds assets/, examples/ and workspace.yaml next to itself (specs.py,
  # night.py: Path(__file__).parents[...]), so they are installed beside it.
  nightly-e2e = python.pkgs.buildPythonPackage {
    pname = project.name;
    inherit (project) version;
    pyproject = true;
    src = source.app;
    build-system = [ python.pkgs.setuptools ];
    # pyproject.toml bounds setuptools for pip users; the release's setuptools builds it as well.
    pypaBuildFlags = [ "--skip-dependency-check" ];
    dependencies = inGroup "runtime";
    postInstall = ''
      cp -r assets examples workspace.yaml $out/${python.sitePackages}/
    '';
    pythonImportsCheck = [
      "pipelines"
      "pipelines.launch.wrapper"
    ];
    doCheck = false; # the unit tests are the flake's checks.unit
    meta.mainProgram = "nightly";
  };

  # Python with the application: bin/nightly, bin/dagster and the interpreter in one prefix.
  app = python.withPackages (_: [ nightly-e2e ]);

  # State goes to ./.nightly unless NIGHTLY_HOME says otherwise (the store is read-only).
  command =
    name: args:
    pkgs.writeShellApplication {
      inherit name;
      text = ''
        export NIGHTLY_HOME="''${NIGHTLY_HOME:-$PWD/.nightly}"
        exec ${app}/bin/nightly ${args} "$@"
      '';
    };
  nightly = command "nightly" "";
  nightly-ui = command "nightly-ui" "ui";

  # `nix build`: the application's bin/ (dagster, python3, ...) with bin/nightly and
  # bin/nightly-ui replaced by the commands above, so result/bin/nightly keeps its state in
  # ./.nightly as `nix run` does, not in the read-only store.
  default = pkgs.runCommand "nightly-e2e-${project.version}" { } ''
    mkdir -p $out/bin
    ln -s ${app}/bin/* $out/bin/
    ln -sfn ${nightly}/bin/nightly $out/bin/nightly
    ln -sfn ${nightly-ui}/bin/nightly-ui $out/bin/nightly-ui
  '';

  # Every pin (runtime and test): what the checks and the dev shell run with.
  devEnv = python.withPackages (_: lib.attrValues wheels);

  shell = pkgs.mkShell {
    packages = [
      devEnv
      pkgs.uv
      pkgs.kubectl
      pkgs.kustomize
      pkgs.chromium
      pkgs.postgresql
      pkgs.nix
      pkgs.nixfmt
      pkgs.git
      pkgs.gnumake
    ];
    env = {
      # uv uses Nix's Python and never downloads one; wheels uv installs into a venv find the
      # C++ runtime and zlib here rather than in /usr/lib (absent on NixOS).
      UV_PYTHON = "${python}/bin/python3";
      UV_PYTHON_DOWNLOADS = "never";
      LD_LIBRARY_PATH = lib.makeLibraryPath [
        pkgs.stdenv.cc.cc.lib
        pkgs.zlib
      ];
    };
    # The checkout is the folder holding flake.nix, upward from where `nix develop` started (it may
    # be a subfolder: nix looks upward too); none found, the starting folder.
    shellHook = ''
      nightly_root=$PWD
      while [ ! -e "$nightly_root/flake.nix" ] && [ -n "$nightly_root" ]; do nightly_root=''${nightly_root%/*}; done
      [ -e "$nightly_root/flake.nix" ] || nightly_root=$PWD
      nightly_root=''${nightly_root:-/}
      export PYTHONPATH="$nightly_root''${PYTHONPATH:+:$PYTHONPATH}"
      export NIGHTLY_HOME="''${NIGHTLY_HOME:-$nightly_root/.nightly}"
      unset nightly_root
      echo "nightly-e2e dev shell: python -m pipelines run | python -m pytest -m 'not slow' | ruff check pipelines tests bench examples"
    '';
  };

  images = import ./images.nix {
    inherit
      pkgs
      python
      app
      wheels
      source
      ;
    version = project.version;
    baseImages = (lib.importJSON ./base-images.json).images;
  };

  checks = {
    ruff = pkgs.runCommand "nightly-e2e-ruff" { nativeBuildInputs = [ devEnv ]; } ''
      cd ${source.tree}
      ruff check --no-cache pipelines tests bench examples
      touch $out
    '';
    # Unit tests only: the slow ones start servers and browsers, and tests/nix runs Nix itself,
    # which a build sandbox cannot.
    unit =
      pkgs.runCommand "nightly-e2e-unit-tests"
        {
          nativeBuildInputs = [
            devEnv
            pkgs.kubectl
            pkgs.git
          ];
        }
        ''
          cp -r ${source.tree} src
          chmod -R u+w src
          cd src
          export HOME=$TMPDIR NIGHTLY_HOME=$TMPDIR/nightly
          python -m pytest -q -p no:cacheprovider -m "not slow" --ignore=tests/nix
          touch $out
        '';
  };
in
{
  inherit
    nightly-e2e
    app
    default
    nightly
    nightly-ui
    devEnv
    shell
    images
    checks
    ;
}
