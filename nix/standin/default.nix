# A stand-in for the flake's `nixpkgs` input, for evaluating flake.nix where nixpkgs cannot be
# fetched. Each scope (pkgs, python311, python311.pkgs, dockerTools, lib) holds exactly the names
# recorded in nix/nixpkgs-attrs.json and nothing else, so the flake using a name the release lacks
# fails with Nix's own "attribute 'NAME' missing". Values are inert: packages are fake
# derivations (a name and an out path) and builders return fake derivations that keep their
# arguments, so tests can read what the flake asked for. Nothing here builds anything.
{
  record ? builtins.fromJSON (builtins.readFile ../nixpkgs-attrs.json),
  systems ? [
    "x86_64-linux"
    "aarch64-linux"
  ],
}:
let
  fake = import ./fakes.nix;
  scope =
    name: behaviours:
    builtins.listToAttrs (
      map (attr: {
        name = attr;
        value = behaviours.${attr} or (fake.package attr);
      }) (builtins.attrNames record.scopes.${name})
    );

  lib = scope "lib" fake.lib;

  pkgsFor =
    system:
    let
      pythonPkgs = scope "python311.pkgs" {
        buildPythonPackage = args: fake.drv "python3.11-${args.pname}-${args.version}" args;
      };
      python311 = fake.package "python3-3.11" // scope "python311" {
        pkgs = pythonPkgs;
        sitePackages = "lib/python3.11/site-packages";
        withPackages = f: fake.drv "python3-3.11-env" { packages = f pythonPkgs; };
      };
      dockerTools = scope "dockerTools" {
        # like the real result, it tells the name and tag it loads as (passthru imageName/imageTag)
        buildLayeredImage =
          args:
          fake.drv "${baseNameOf args.name}.tar.gz" (
            args
            // {
              imageName = args.name;
              imageTag = args.tag;
            }
          );
        pullImage = args: fake.drv "docker-image-${baseNameOf args.imageName}.tar" args;
      };
    in
    scope "pkgs" {
      inherit lib python311 dockerTools;
      stdenv = fake.package "stdenv-linux" // {
        hostPlatform.system = system;
        cc.cc.lib = fake.package "gcc-lib";
      };
      mkShell = args: fake.drv "nix-shell" args;
      writeShellApplication = args: fake.drv args.name args;
      runCommand = name: env: script: fake.drv name (env // { inherit script; });
      fetchurl = args: fake.drv (baseNameOf args.url) args;
    };
in
{
  inherit lib;
  inherit (record.release) rev lastModified;
  legacyPackages = lib.genAttrs systems pkgsFor;
}
