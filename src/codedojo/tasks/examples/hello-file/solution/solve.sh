#!/bin/bash
echo world > hello.txt
