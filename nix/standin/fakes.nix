# Inert values for nix/standin: fake derivations, and the few lib functions the flake calls,
# written with builtins so that evaluating them needs no nixpkgs.
let
  outPath = name: "/nix/store/${builtins.substring 0 32 (builtins.hashString "sha256" name)}-${name}";
  drv =
    name: args:
    args
    // {
      type = "derivation";
      inherit name;
      outPath = outPath name;
      drvPath = outPath "${name}.drv";
    };
in
{
  inherit drv;
  package = name: drv name { };
  lib = {
    attrValues = builtins.attrValues;
    mapAttrs = builtins.mapAttrs;
    filterAttrs =
      pred: set:
      builtins.listToAttrs (
        builtins.concatMap (n: if pred n set.${n} then [ { name = n; value = set.${n}; } ] else [ ]) (
          builtins.attrNames set
        )
      );
    genAttrs =
      names: f:
      builtins.listToAttrs (
        map (n: {
          name = n;
          value = f n;
        }) names
      );
    importJSON = path: builtins.fromJSON (builtins.readFile path);
    makeLibraryPath = pkgs: builtins.concatStringsSep ":" (map (p: "${p}/lib") pkgs);
    optionals = cond: list: if cond then list else [ ];
    fakeSha256 = "0000000000000000000000000000000000000000000000000000";
  };
}
