#!/bin/bash
# Steps without their own solution/ use this one.
true
