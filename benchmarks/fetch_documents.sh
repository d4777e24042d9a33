#!/usr/bin/env bash
# The real documents behind benchmarks/results/documents.md, from Debian's packages (never committed): the Bash
# Reference Manual as PDF and the bash manual page as HTML (bash-doc), and Python's library reference pages
# (python3.11-doc) that become an EPUB's chapters. Usage: bash benchmarks/fetch_documents.sh DEST_DIR
set -euo pipefail
dest=${1:?destination directory}
mkdir -p "$dest"
work=$(mktemp -d)
(cd "$work" && apt-get download bash-doc python3.11-doc >/dev/null)
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
cp "$work/x/usr/share/doc/bash/bashref.pdf" "$work/x/usr/share/doc/bash/bash.html" "$dest/"
mkdir -p "$dest/pylib"
cp "$work"/x/usr/share/doc/python3.11/html/library/{pathlib,os,json,re,argparse,logging,subprocess,datetime}.html "$dest/pylib/"
rm -rf "$work"
ls -l "$dest"
