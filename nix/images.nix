# The OCI images the Kubernetes pods run (nix build .#images.<name>; load with
# `docker load < result` or push with `skopeo copy docker-archive:result docker://NAME:TAG`).
#
# code-location: the Dagster code location (k8s/base/code-location.yaml) and the image
#   K8sRunLauncher runs each Dagster run in.
# test-pod.<framework>: the framework's own image (pulled by name and digest, nix/base-images.json)
#   plus one layer with the pipelines package, so a pod can run
#   `python -m pipelines.launch.wrapper` with the framework's Python and CUDA. The wrapper uses
#   the standard library only (and dagster-pipes, added beside it), so the layer holds sources,
#   not a second Python with Dagster's closure.
{
  pkgs,
  python,
  app,
  wheels,
  source,
  version,
  baseImages,
}:
let
  inherit (pkgs) lib;
  site = python.sitePackages;

  codeLocation = pkgs.dockerTools.buildLayeredImage {
    name = "ghcr.io/example/nightly-e2e";
    tag = version;
    contents = [
      app
      pkgs.bashInteractive
      pkgs.coreutils
      pkgs.cacert
      pkgs.fakeNss
    ];
    extraCommands = ''
      mkdir -m 1777 tmp
    '';
    config = {
      Cmd = [
        "dagster"
        "api"
        "grpc"
        "-m"
        "pipelines.definitions"
        "-h"
        "0.0.0.0"
        "-p"
        "4000"
      ];
      User = "65534:65534"; # nobody (fakeNss): the code location needs no root
      WorkingDir = "/tmp";
      ExposedPorts."4000/tcp" = { };
      Env = [
        "PATH=/bin" # the contents are linked into /bin; a runtime's default PATH is not relied on
        "HOME=/tmp"
        "NIGHTLY_HOME=/tmp/nightly"
        "NIGHTLY_DEPLOYMENT=production"
        "SSL_CERT_FILE=${pkgs.cacert}/etc/ssl/certs/ca-bundle.crt"
      ];
    };
  };

  # /opt/nightly-e2e: pipelines/ (with launch/wrapper.py) and dagster_pipes/, nothing else.
  podLayer = pkgs.runCommand "nightly-e2e-pod-layer" { } ''
    mkdir -p $out/opt/nightly-e2e
    cp -r ${source.app}/pipelines $out/opt/nightly-e2e/pipelines
    cp -r ${wheels.dagster-pipes}/${site}/dagster_pipes $out/opt/nightly-e2e/dagster_pipes
  '';

  testPod =
    framework: base:
    pkgs.dockerTools.buildLayeredImage {
      name = base.podImage;
      tag = "${base.finalImageTag}-${version}";
      fromImage = pkgs.dockerTools.pullImage {
        inherit (base) imageName imageDigest finalImageTag;
        sha256 = if base.sha256 == "" then lib.fakeSha256 else base.sha256;
        finalImageName = base.imageName;
      };
      contents = [ podLayer ];
      # dockerTools merges only the base image's Env into the new config; its WorkingDir,
      # User and Cmd are not inherited, so the checkout folder is stated again here.
      config = {
        WorkingDir = base.workdir;
        Env = [ "PYTHONPATH=/opt/nightly-e2e" ];
        Labels."org.opencontainers.image.base.name" = "${base.imageName}@${base.imageDigest}";
      };
    };
in
{
  code-location = codeLocation;
  pod-layer = podLayer;
  test-pod = lib.mapAttrs testPod baseImages;
}
