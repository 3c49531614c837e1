"""Offline stand-in for the get-pip.py script ansible-test downloads.

ansible-test runs it (as ~/.ansible/test/cache/get_pip_24_2.py) inside each fresh virtual
environment with pip's options and the packages to install. Without access to that download,
bootstrap pip from the standard library's ensurepip, then install the requested packages from
the package index as usual.
"""

import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")

environment = dict(os.environ)
ensurepip.bootstrap(upgrade=True)  # sets PIP_CONFIG_FILE=/dev/null in os.environ; the install below needs the machine's pip.conf
arguments = [argument for argument in sys.argv[1:] if argument not in GET_PIP_ONLY_OPTIONS]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *arguments], env=environment))
