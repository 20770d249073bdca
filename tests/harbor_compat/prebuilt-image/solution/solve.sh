#!/bin/bash
cp seed.txt result.txt
